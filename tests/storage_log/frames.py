"""Test helpers that read a log's frames off its segment files, as the format defines
them (not through StreamLog): which codec each record has, and a packed record's
column flags."""

from __future__ import annotations

import struct
from pathlib import Path

from storage_log.framing import parse_forward


def record_frames(log_dir: Path) -> list[tuple[int, memoryview]]:
    """Every record frame of a log's segments, in order: (codec, payload)."""
    out = []
    for seg in sorted(log_dir.glob("*.seg")):
        data = memoryview(seg.read_bytes())
        pos = 0
        while pos < len(data):
            info = parse_forward(data, pos)
            assert info is not None
            if info.rows:
                out.append((info.codec, data[info.payload_offset:
                                             info.payload_offset + info.payload_len]))
            pos = info.end
    return out


def packed_column_flags(blob: memoryview) -> list[int]:
    """The flags of each column of a layout-2 (PACKED) blob: its header walked with the
    format's structs, ``<IH`` then per column ``<BBBqqI`` and its bytes."""
    head, col = struct.Struct("<IH"), struct.Struct("<BBBqqI")
    _, ncols = head.unpack_from(blob, 0)
    at, flags = head.size, []
    for _ in range(ncols):
        _, f, _, _, _, length = col.unpack_from(blob, at)
        flags.append(f)
        at += col.size + length
    assert at == len(blob)
    return flags
