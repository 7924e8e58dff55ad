"""The end of a `cec` process (cli.leave): a normal exit's work without the teardown.

It ends the process only when no thread a normal exit would wait for is alive; it runs
the ``atexit`` functions and flushes what the command printed first; the exit status is
the command's, on success and on a user error.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from cli.leave import may_leave
from tests.cec_spark.helpers import REPO


def test_a_live_non_daemon_thread_keeps_the_normal_exit() -> None:
    assert may_leave()
    go = threading.Event()
    worker = threading.Thread(target=go.wait, daemon=False)
    worker.start()
    try:
        assert not may_leave()
    finally:
        go.set()
        worker.join()
    assert may_leave()
    idle = threading.Thread(target=go.wait, daemon=True)  # a daemon thread is not waited for
    idle.start()
    assert may_leave()


CHILD = textwrap.dedent('''
    import atexit, sys, threading, time
    from pathlib import Path
    import cli.app
    out = Path(sys.argv[1])
    atexit.register(lambda: (out / "atexit").write_text("ran"))
    if sys.argv[2] == "thread":  # a normal exit waits for it: so must this one
        def late():
            time.sleep(0.5)
            (out / "thread").write_text("done")
        threading.Thread(target=late).start()
    print("before the command", end="")  # still in the stdout buffer (a pipe)
    sys.argv = ["cec", *sys.argv[3:]]
    sys.exit(cli.app.main())
''')


def _child(tmp: Path, mode: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, str(tmp), mode, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_process_ends_with_its_output_atexit_and_status(tmp_path: Path) -> None:
    done = _child(tmp_path, "plain", "examples", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("before the command") and "examples" in done.stdout
    assert (tmp_path / "atexit").read_text() == "ran"

    refused = _child(tmp_path, "plain", "export", str(tmp_path / "no-run"), "--out",
                     str(tmp_path / "x.parquet"))
    assert refused.returncode == 2, refused.stderr  # a usage error's documented status
    assert "not a cec run directory" in refused.stderr


def test_a_thread_still_working_is_waited_for(tmp_path: Path) -> None:
    done = _child(tmp_path, "thread", "examples", "--help")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"
