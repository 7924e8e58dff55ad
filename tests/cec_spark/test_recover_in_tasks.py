"""Issue 38 item 1: ``cec recover`` rebuilds in the operator tasks, not in its driver;
``cec recover --partitions`` drains and hands over in Spark tasks too.

A stream-folder run of 3 partitions is killed -9 after its first file was processed
(its open windows in its output logs), the rest of the stream arrives, and
``recover_run`` (what ``cec recover --from-log`` calls) runs in this process with every
entry point that rebuilds or loads an eventual checkpoint made to fail here, in the
driver (Spark's Python workers are other processes: the tasks rebuild as usual). The
recovery must still be exact, and what it explains per partition (n_c, T, t_c, the
extent, the replay) is the tasks' report, equal to what a dry run predicted. The same
with ``partitions=2``: the rescale's drain, split and hand-over fail here too, and the
tasks move the windows its dry run counted.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

import recovery.ec
import recovery.partition  # noqa: F401 - loaded: sys.modules holds it
from cec_spark.read.export import export
from cec_spark.recover.resume import recover_run
from tests.cec_spark.helpers import (
    killed_after_first_file,
    read_export_csv,
    reference_count_windows,
    write_items_csv,
)

pytestmark = pytest.mark.spark

P = 3
ROWS = 6_000
SIZE = 10  # count windows

#: every function that rebuilds an eventual checkpoint or loads window state from a log
STATE_LOADERS = {
    "recovery.partition": ("recover_partition", "recover_from_logs", "scan", "predict"),
    "recovery.ec": ("reconstruct", "reconstruct_reference"),
}


def _forbid_state_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every loader of STATE_LOADERS, under each name a loaded module binds it to (an
    import ``from recovery.partition import recover_partition`` included), raises in
    this process; the names patched."""
    originals = {id(getattr(sys.modules[m], n)): f"{m}.{n}"
                 for m, names in STATE_LOADERS.items() for n in names}
    patched = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not mod_name.startswith(("recovery", "cec_spark", "cec.")):
            continue
        for attr, value in list(vars(mod).items()):
            what = originals.get(id(value))
            if what is None:
                continue

            def refuse(*_a: Any, _what: str = what, **_k: Any) -> Any:
                raise AssertionError(f"the driver of cec recover called {_what}")

            monkeypatch.setattr(mod, attr, refuse)
            patched.append(f"{mod_name}.{attr}")
    return patched


@pytest.mark.parametrize("partitions", [None, 2], ids=["recover", "rescale-3-to-2"])
def test_the_driver_of_recover_loads_no_window_state(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     partitions: int | None) -> None:
    df = write_items_csv(tmp_path / "all.csv", ROWS, keys=60, seed=11)
    run = killed_after_first_file(tmp_path, df, function="max", partitions=P)

    # reads only (may scan the extents; a rescale's dry run loads the windows to count)
    dry = recover_run(run, dry_run=True, partitions=partitions)
    predicted = {e.partition: (e.n_c, e.replay_after_seq, e.t_c) for e in dry.partitions}
    assert all(n_c for n_c, _, _ in predicted.values()), dry  # open windows everywhere
    if partitions is not None:
        assert dry.rescale is not None and sum(dry.rescale.windows_per_partition) > 0, dry

    patched = _forbid_state_loads(monkeypatch)
    assert "cec_spark.recover.partitions.predict" in patched, patched
    for name in ("_drain", "_process_to_cut", "split_windows", "first_record"):
        monkeypatch.setattr(f"cec_spark.recover.rescale.{name}",  # the rescale's tasks'
                            lambda *_a, _n=name, **_k: pytest.fail(f"the driver ran {_n}"))
    started = time.monotonic()
    # `cec recover --from-log RUN [--partitions 2]`, in this process
    rec = recover_run(run, progress=False, partitions=partitions)
    print(f"recover_run in-process: {time.monotonic() - started:.1f} s", file=sys.stderr)
    monkeypatch.undo()

    assert rec.resumed is not None and rec.resumed.completed, rec
    if partitions is not None:  # the tasks moved what the dry run counted
        assert rec.rescale is not None and dry.rescale is not None
        assert rec.rescale.windows_per_partition == dry.rescale.windows_per_partition
        assert [o.state for o in rec.rescale.old] == ["drained"] * P, rec.rescale
        assert not (run / "handover").exists()  # removed once generations.toml was written
        assert len(rec.partitions) == partitions
    else:
        assert [e.partition for e in rec.partitions] == list(range(P))
    # the tasks' reports: what the dry run predicted (a rescale's new partitions start
    # from their hand-over record: nothing to predict before it is written)
    for e in (rec.partitions if partitions is None else []):
        assert e.fresh_start is False and e.extent is not None and e.replay is not None, e
        assert (e.n_c, e.replay_after_seq, e.t_c) == predicted[e.partition], (e, predicted)
        assert {ph.name for ph in e.phases} >= {"scan", "load", "replay"}, e.phases
        assert e.reason.startswith("EC of"), e.reason
    out = tmp_path / "out.csv"
    export(run, out, "csv")
    got = read_export_csv(out)
    cols = ["key", "window_start", "window_end", "count", "value"]
    want = reference_count_windows(df, SIZE, function="max")
    assert got[cols].values.tolist() == want[cols].values.tolist()
