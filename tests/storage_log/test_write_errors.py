"""A refused write (disk full, read-only file system) is one clear error, exit 3, and
nothing committed is lost (issue 17 item 10).

Root ignores file modes, so the refusals are real ones: a child process in its own
mount namespace (``unshare -m``) writes a log on a 256 KiB tmpfs until it is full, or
on a read-only bind mount.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storage_log.log import StreamLog
from tests.storage_log.conftest import make_batch, rows

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent('''
    import sys
    import numpy as np, pyarrow as pa
    from storage_log.errors import LogWriteError
    from storage_log.log import StreamLog
    path, n = sys.argv[1], 0
    try:
        with StreamLog.open(path, writable=True, create=True, compression_level=1) as w:
            rng = np.random.default_rng(1)
            while True:
                seq = np.arange(n, n + 500, dtype=np.int64)
                w.append(pa.record_batch([seq, seq, rng.random(500)], names=["ts", "seq", "v"]))
                w.commit()
                n += 500
    except LogWriteError as exc:
        print(n, exc.exit_code, exc, sep="\\n")
''')


def _child(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI must run as root with unshare (util-linux)")
        pytest.skip("needs root and unshare")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script, "sh", *args], check=False, capture_output=True,
                          text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_disk_full(tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    (tmp_path / "child.py").write_text(CHILD)
    proc = _child('mount -t tmpfs -o size=256k tmpfs "$1" && '
                  f'{sys.executable} "$2" "$1/log" && cp -a "$1/log" "$3"',
                  str(mnt), str(tmp_path / "child.py"), str(tmp_path / "copy"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    committed, code, message = proc.stdout.strip().split("\n", 2)
    assert code == "3" and "No space left on device" in message and "log" in message
    assert "Traceback" not in proc.stdout
    with StreamLog.open(tmp_path / "copy") as r:  # everything committed is there
        assert rows(r.read_forward()) == list(range(int(committed)))
        r.verify()


def test_read_only_file_system(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with StreamLog.open(log, writable=True, create=True) as w:
        w.append(make_batch(0, 5))
        w.commit()
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && '
              f'{sys.executable} -c "$2" "$1/log"')
    code = textwrap.dedent('''
        import sys
        from storage_log.errors import LogWriteError
        from storage_log.log import StreamLog
        try:
            StreamLog.open(sys.argv[1], writable=True)
        except LogWriteError as exc:
            print(exc.exit_code, exc)
    ''')
    proc = _child(script, str(tmp_path), code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("3 ") and "Read-only file system" in proc.stdout
    with StreamLog.open(log) as r:
        assert rows(r.read_forward()) == list(range(5))
