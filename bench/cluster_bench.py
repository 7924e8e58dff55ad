"""cec on a standalone Spark cluster of 1, 2 and 3 Workers on this machine (issue 15).

For each Worker count W it starts a Master and W Workers (each in its own mount
namespace, seeing the shared directory through its own FUSE mount, as in
``tests/on_cluster``), then runs the built-in workload (``cli/examples/items.toml``):

* failure-free: whole-process time of ``cec run pipeline`` and source rows/s;
* with the Worker of partition 0 SIGKILLed once the operators have consumed
  ``--kill-at`` (default 40 %) of the failure-free run's input (a replacement Worker
  joins at once, as a restarted host would): the time from the kill to the output
  complete (the run's end, or the end of ``cec recover`` if the run gave up), beside
  the failure-free run's time from the same point to its end.

Every run's export must equal the first failure-free run's (same query, same
output), or the benchmark fails. Ratios are against W = 1 in the same invocation.
This machine has 2 cores, so Workers add slots, not CPU: throughput does not grow
with W (the ingest does not scale out yet either, issue 16); it is reported as it is.

    python -m bench.cluster_bench [--workers 1,2,3] [--rows N] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import harness  # noqa: E402
from bench.harness import Run  # noqa: E402
from tests.on_cluster.standalone import Cluster, missing_tools  # noqa: E402

P = 4
RUN_TIMEOUT_S = 900


def _cores(workers: int) -> int:
    """Cores per Worker so that every W has at least P + 1 slots."""
    return max(2, -(-(P + 1) // workers))


def _cec(cluster: Cluster, log: Path, *args: str) -> Run:
    """``cec ARGS`` in its own session: standard error to ``log``, output to LOG.out."""
    log.unlink(missing_ok=True)
    return Run([sys.executable, "-m", "cli.app", *args], log, stdout=log.with_suffix(".out"),
               env={**cluster.env(), "PYTHONPATH": str(REPO)})


def _finish(run: Run) -> tuple[int, str, str]:
    """Its exit code, standard output and error (SystemExit if it hung)."""
    m = run.wait(RUN_TIMEOUT_S, "its exit")
    err = run.log.read_text(errors="replace")
    if m.status == "timeout":
        raise SystemExit(f"{run.name} hung ({RUN_TIMEOUT_S} s):\n{err[-3000:]}")
    assert m.code is not None
    return m.code, run.log.with_suffix(".out").read_text(errors="replace"), err


def _state(run: Path, p: int) -> dict[str, Any]:
    try:
        raw = json.loads((run / "state" / f"p{p:04d}.json").read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _export_digest(cluster: Cluster, run: Path) -> str:
    out = run.parent / f"{run.name}.csv"
    code, _, err = _finish(_cec(cluster, run.parent / f"{run.name}-export.log", "export",
                                str(run), "--out", str(out)))
    if code != 0:
        raise SystemExit(f"export of {run} failed: {err[-2000:]}")
    return hashlib.sha256(out.read_bytes()).hexdigest()


def _spec(d: Path, rows: int | None) -> Path:
    text = (REPO / "cli" / "examples" / "items.toml").read_text()
    if rows is not None:
        text = text.replace("rows = 3000000", f"rows = {rows}")
    spec = d / "items.toml"
    spec.write_text(text)
    return spec


def _consumed(run: Path) -> int:
    return sum(int(_state(run, p).get("in_tuples") or 0) for p in range(P))


def measure(workers: int, base: Path, rows: int | None, kill_at: float) -> dict[str, Any]:
    shared, private = base / "shared", base / "private"
    shared.mkdir(parents=True)
    private.mkdir()
    cluster = Cluster.start(base / "spark", shared, private, workers=workers,
                            cores=_cores(workers))
    try:
        spec = _spec(shared, rows)
        run = shared / "free"
        t0 = time.monotonic()
        code, out, err = _finish(_cec(cluster, base / "free.log", "run", "pipeline", str(spec),
                                      "--log-dir", str(run), "--master", cluster.url,
                                      "--json"))
        whole = time.monotonic() - t0
        if code != 0:
            raise SystemExit(f"failure-free run on {workers} Workers: exit {code}\n"
                             f"{err[-3000:]}")
        summary = json.loads(out)
        free_digest = _export_digest(cluster, run)
        tuples = int(summary["operator_tuples"])
        steady = float(summary.get("steady_s") or 0.0)

        run = shared / "killed"
        proc = _cec(cluster, base / "killed.log", "run", "pipeline", str(spec), "--log-dir",
                    str(run), "--master", cluster.url, "--json")
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while _consumed(run) < kill_at * tuples:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit(f"the run on {workers} Workers ended before the kill point")
            time.sleep(0.05)
        at = _consumed(run) / tuples
        victim = cluster.worker_of(int(_state(run, 0)["pid"]))
        killed_at = time.monotonic()
        cluster.kill_worker(victim)
        cluster.add_worker(_cores(workers))
        code, _, err = _finish(proc)
        recovered_by = "run"
        if code != 0:  # the run gave up: recover on the same cluster
            recovered_by = "recover"
            code, _, err = _finish(_cec(cluster, base / "recover.log", "recover",
                                        "--from-log", str(run)))
            if code != 0:
                raise SystemExit(f"recover on {workers} Workers: exit {code}\n{err[-3000:]}")
        to_complete = time.monotonic() - killed_at
        killed_digest = _export_digest(cluster, run)
    finally:
        cluster.stop()
    return {"workers": workers, "cores_per_worker": _cores(workers),
            "source_rows": summary["source_rows"], "whole_process_s": round(whole, 2),
            "rows_per_s": round(summary["source_rows"] / whole, 1),
            "steady_rows_per_s": summary.get("steady_rows_per_s"),
            "killed_at_fraction": round(at, 3),
            # what a failure-free run spends on the same rest of its input (steady phase)
            "free_rest_s": round((1 - at) * steady, 2),
            "kill_to_complete_s": round(to_complete, 2), "completed_by": recovered_by,
            "digest_free": free_digest, "digest_killed": killed_digest}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,3")
    ap.add_argument("--rows", type=int, default=None, help="source rows (default 3 M)")
    ap.add_argument("--kill-at", type=float, default=0.4,
                    help="fraction of the input consumed when the Worker is killed")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cluster")
    args = ap.parse_args(argv)
    harness.byte_compiled(None)
    why = missing_tools()
    if why is not None:
        print(f"cluster_bench: {why}", file=sys.stderr)
        return 2
    results = []
    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        **harness.commit(), "load_start": harness.load(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="cec-cluster-bench-") as tmp:
        for w in (int(x) for x in args.workers.split(",")):
            r = measure(w, Path(tmp) / f"w{w}", args.rows, args.kill_at)
            results.append(r)
            print(json.dumps(r), flush=True)
    digests = {r["digest_free"] for r in results} | {r["digest_killed"] for r in results}
    if len(digests) != 1:
        print("cluster_bench: the exports differ between runs", file=sys.stderr)
        return 1
    one = results[0]
    print(f"\nbuilt-in workload, P = {P}, {one['source_rows']} source rows; every export "
          "equal (sha256 " + next(iter(digests))[:12] + ")")
    print("| Workers | cores each | whole run s | rows/s | vs 1 Worker | killed at | SIGKILL "
          "of a Worker to output complete s | failure-free, same rest s | vs 1 Worker | "
          "completed by |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['workers']} | {r['cores_per_worker']} | {r['whole_process_s']} | "
              f"{r['rows_per_s']:.0f} | {r['rows_per_s'] / one['rows_per_s']:.2f} | "
              f"{r['killed_at_fraction']:.0%} | {r['kill_to_complete_s']} | "
              f"{r['free_rest_s']} | "
              f"{r['kill_to_complete_s'] / one['kill_to_complete_s']:.2f} | "
              f"{r['completed_by']} |")
    args.out.mkdir(parents=True, exist_ok=True)
    meta["load_end"] = harness.load()
    (args.out / "cluster.json").write_text(json.dumps({**meta, "runs": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
