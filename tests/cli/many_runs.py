"""``python -m tests.cli.many_runs SPEC OUT_DIR N``: ``cec run pipeline`` N times in one
process (one Spark session, as a user's notebook would), then ``cec export`` each run.

The test of issue 14 runs this child under a hard timeout: the hang it guards against
was a deadlock between the threads one run starts (progress display, ingest,
operators), which a shared session makes no less likely. ``faulthandler`` dumps every
thread's stack to stderr if one run takes longer than :data:`RUN_LIMIT_S`. Prints
``run I S`` (seconds) after each run.
"""

from __future__ import annotations

import faulthandler
import sys
import time
from pathlib import Path

from cli import app

RUN_LIMIT_S = 120


def cec(args: list[str]) -> int:
    """The console script's entry point, in this process (typer exits when done)."""
    try:
        return app.main(args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def main(argv: list[str]) -> int:
    spec, out, n = argv[0], Path(argv[1]), int(argv[2])
    for i in range(n):
        faulthandler.dump_traceback_later(RUN_LIMIT_S, exit=True)
        t0 = time.monotonic()
        run = out / f"run{i}"
        code = cec(["run", "pipeline", spec, "--log-dir", str(run)])
        if code == 0:
            code = cec(["export", str(run), "--out", str(out / f"export{i}.csv")])
        faulthandler.cancel_dump_traceback_later()
        if code != 0:
            print(f"run {i} exit {code}", flush=True)
            return 1
        print(f"run {i} {time.monotonic() - t0:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
