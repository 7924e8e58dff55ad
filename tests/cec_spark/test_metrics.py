"""The Prometheus text file of a run (pure formatting; the run's own file is checked in
tests/cec_spark/test_datasource.py)."""

from __future__ import annotations

import re
from pathlib import Path

from cec_spark.run import metrics

RUN = r'run="(?:[^"\\]|\\.)*"'  # a label value, escapes allowed
LINE = re.compile(r'^(# (HELP|TYPE) \w+ .+|\w+\{' + RUN + r'(,partition="\d+")?\} -?[\d.e+]+)$')


def parse(text: str) -> dict[tuple[str, str | None], float]:
    """{(metric, partition or None): value}; every line must be valid exposition."""
    out: dict[tuple[str, str | None], float] = {}
    for line in text.splitlines():
        assert LINE.match(line), line
        if line.startswith("#"):
            continue
        m = re.match(r'(\w+)\{' + RUN + r'(?:,partition="(\d+)")?\} (.+)$', line)
        assert m is not None
        out[m.group(1), m.group(2)] = float(m.group(3))
    return out


def test_exposition_per_partition_and_run() -> None:
    states = [{"in_tuples": 10, "r": 3, "g_open": 4, "g_check": 1, "n_open": 2, "q": 5,
               "u": 7, "done": True,
               "recovered": {"phases": [{"measured_s": 0.25}, {"measured_s": 0.5},
                                        {"measured_s": None}]}},
              {}]  # partition 1 has not started: no per-partition series for it
    text = metrics.exposition('runs/"x"', states, [9, None], source_rows=100, sealed=True,
                              up_s=1.5)
    got = parse(text)
    assert got["cec_input_tuples_total", "0"] == 10 and got["cec_results_total", "0"] == 3
    assert got["cec_extent_records", "0"] == 5 and got["cec_replay_length", "0"] == 7
    assert got["cec_upstream_committed_seq", "0"] == 9
    assert got["cec_recovery_seconds", "0"] == 0.75 and got["cec_partition_done", "0"] == 1
    assert not any(p == "1" for _, p in got)
    assert got["cec_source_rows_total", None] == 100 and got["cec_ingest_sealed", None] == 1
    assert 'run="runs/\\"x\\""' in text  # label values escaped
    assert text.count("# TYPE cec_input_tuples_total counter") == 1


def test_write_is_atomic_and_never_raises(tmp_path: Path) -> None:
    metrics.write(tmp_path / "m", "a 1\n")
    assert (tmp_path / "m" / "cec.prom").read_text() == "a 1\n"
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["cec.prom"]
    (tmp_path / "file").write_text("")
    metrics.write(tmp_path / "file" / "m", "a 1\n")  # not a directory: silently skipped


def test_a_superseded_writer_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """The driver number is asked again at the last moment, right before the replace:
    a driver frozen while it made the text and woken after a newer one took the run
    writes nothing (tests/cli/test_standby.py saw such a write once in CI)."""
    from cec_spark.run import metrics as m

    m.write(tmp_path, "first\n")
    m.write(tmp_path, "second\n", still_ours=lambda: False)
    assert (tmp_path / m.FILE).read_text() == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [m.FILE]  # no temporary left
    m.write(tmp_path, "third\n", still_ours=lambda: True)
    assert (tmp_path / m.FILE).read_text() == "third\n"
