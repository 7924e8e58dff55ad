"""The checksum line of the run directory's small TOML files (``run.toml``,
``generations.toml``) and their format version.

A signed text ends with one line ``# cec-checksum: xxh64 HEX``: the xxh64 of every byte
before it (the body ends with a newline). A text with no checksum line is a run from
before checksums and is trusted; one whose line is not the last, or whose hash differs,
is not (:func:`check_run_text` says why). Pure: text in, text out.
"""

from __future__ import annotations

import xxhash

__all__ = ["CHECKSUM_PREFIX", "FORMAT_VERSION", "check_run_text", "sign_run_text"]

FORMAT_VERSION = 1
CHECKSUM_PREFIX = "# cec-checksum: xxh64 "


def sign_run_text(text: str) -> str:
    """``text`` with its checksum line appended (the last line of every run.toml)."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}{CHECKSUM_PREFIX}{xxhash.xxh64_hexdigest(body.encode())}\n"


def check_run_text(text: str, origin: str) -> str | None:
    """None if ``text`` carries a valid checksum (or none, a run from before checksums);
    else why not."""
    head, sep, last = text.rstrip("\n").rpartition("\n")
    if not last.startswith(CHECKSUM_PREFIX):
        return None if CHECKSUM_PREFIX not in text else f"{origin}: its checksum line is " \
            "not the last line"
    want = last[len(CHECKSUM_PREFIX):].strip()
    got = xxhash.xxh64_hexdigest((head + sep).encode())
    return None if got == want else f"{origin}: checksum mismatch (stored {want}, " \
        f"content {got})"
