"""Issue 40 item 1: a run directory written in record format 1 (every output row carries
the whole partial aggregate, as cec wrote every run before format 2) is recovered,
rescaled and exported by today's code, exactly.

The old run is a real ``cec run pipeline`` of a stream folder started with
``CEC_RECORD_FORMAT=1`` (its new output logs begin in format 1, what the code before
format 2 wrote: the same columns, the same values), killed -9 after its first file. The
rest of the stream arrives and ``cec recover --from-log`` runs in this process, without
the variable: each output log goes on in the format it has (format 1: its schema is
unchanged, the rows appended after the recovery carry every field), and a rescale's new
generation begins its logs in format 2 (a run of both formats). The export equals the
one computed from the input with pandas. A failure-free run of the same input in format
2 exports the same file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cec.records import record_format
from cec.window_state import LOGGED
from cec_spark.read.export import export
from cec_spark.recover.resume import recover_run
from cec_spark.rundir.layout import RunLayout
from storage_log.log import StreamLog
from tests.cec_spark.helpers import (
    cec,
    killed_after_first_file,
    read_export_csv,
    reference_count_windows,
    spec_text,
    write_items_csv,
)

pytestmark = pytest.mark.spark

P = 3
ROWS = 6_000
SIZE = 10  # count windows: format 2 keeps their first_ts/last_ts (the results' bounds)


def _formats(run: Path, partitions: int) -> list[int | None]:
    """Each current output log's record format (None: no row yet)."""
    layout = RunLayout(run)
    out: list[int | None] = []
    for p in range(partitions):
        with StreamLog.open(layout.output(p)) as log:
            out.append(None if log.schema is None else record_format(log.schema))
    return out


@pytest.mark.parametrize("partitions", [None, 2], ids=["recover", "rescale-3-to-2"])
def test_a_format_1_run_is_recovered_rescaled_and_exported_exactly(
        tmp_path: Path, partitions: int | None) -> None:
    df = write_items_csv(tmp_path / "all.csv", ROWS, keys=60, seed=13)
    run = killed_after_first_file(tmp_path, df, function="min", partitions=P,
                                  env={"CEC_RECORD_FORMAT": "1"})
    assert _formats(run, P) == [1] * P  # an old run: every log holds format-1 rows
    with StreamLog.open(RunLayout(run).output(0)) as log:
        assert log.schema is not None and {f.name for f in LOGGED} <= set(log.schema.names)

    assert os.environ.get("CEC_RECORD_FORMAT") is None
    rec = recover_run(run, progress=False, partitions=partitions)  # today's code
    assert rec.resumed is not None and rec.resumed.completed, rec
    if partitions is None:
        assert _formats(run, P) == [1] * P  # each log went on in its format
    else:
        assert RunLayout(run).generation == 1
        assert _formats(run, partitions) == [2] * partitions  # new logs: format 2
    out = tmp_path / "out.csv"
    export(run, out, "csv")
    got = read_export_csv(out)
    cols = ["key", "window_start", "window_end", "count", "value"]
    want = reference_count_windows(df, SIZE, function="min")
    assert got[cols].values.tolist() == want[cols].values.tolist()

    # the same input, failure-free, in format 2: the same export, byte for byte
    whole = tmp_path / "whole"
    whole.mkdir()
    df.to_csv(whole / "f-000.csv", index=False)
    (whole / "_END").touch()
    spec2 = tmp_path / "s2.toml"
    spec2.write_text(spec_text('kind = "stream-dir"\npath = "whole"\n'
                               'time_field = "item_time"\npoll_ms = 50', function="min",
                               partitions=P))
    run2 = tmp_path / "run2"
    cec(["run", "pipeline", str(spec2), "--log-dir", str(run2)], check=True)
    assert _formats(run2, P) == [2] * P
    out2 = tmp_path / "out2.csv"
    export(run2, out2, "csv")
    assert read_export_csv(out2)[cols].values.tolist() == got[cols].values.tolist()
