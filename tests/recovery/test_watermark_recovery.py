"""Exact recovery with watermarks in the upstream log (issue 37).

The upstream is written as the ingest writes it: each chunk's record committed with an
ingest token (:mod:`cec.ingest_token`) carrying the watermark W, and token-only commits
(a quiet partition: no row, a new W). The operator task's loop runs over it
(:func:`task_loop`: records to ``process``, a token whose W is above the operator's
to ``watermark(W, seq)``, outputs grouped into commits as the task does), the output
log is cut at every commit boundary (also right after a watermark's output) and at
random bytes, recovered (``recover_partition``: the replay reads the tokens), and the
task's loop resumed after ``t_c`` with tokens: the R and G_open rows equal the
failure-free run's exactly.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cec.ingest_token import IngestToken, encode_token
from cec.policy import PolicyConfig
from cec.windows import CountWindow, SessionWindow, TimeWindow, WindowSpec
from recovery.partition import recover_partition
from recovery.rescale import handoff, windows_table
from recovery.upstream import watermark_of
from storage_log.follow import CommitToken
from storage_log.log import StreamLog
from tests.recovery.harness import OPERATORS, Scenario, make_stream, r_rows
from tests.recovery.logs import SEGMENT_BYTES, cut_copy, global_size, log_bytes, read_all


def write_upstream(path: Path, inputs: list[pa.RecordBatch], rng: random.Random
                   ) -> list[int]:
    """Each batch committed with a token carrying W (at most the next batch's first
    ts, so no later tuple is older), sometimes without W or token; quiet stretches of
    token-only commits with rising W; after the last batch W jumps past every window.
    Returns the watermarks written, in order."""
    marks: list[int] = []
    w = 0
    chunk = 0

    def token(wm: int | None) -> bytes:
        nonlocal chunk
        chunk += 1
        return encode_token(IngestToken(chunk, chunk * 10, chunk * 10, 0, wm))

    with StreamLog.open(path, writable=True, create=True, fsync="never",
                        segment_bytes=SEGMENT_BYTES) as log:
        for i, b in enumerate(inputs):
            log.append(b)
            nxt = (int(inputs[i + 1].column("ts")[0].as_py()) if i + 1 < len(inputs)
                   else int(b.column("ts")[-1].as_py()) + 10_000)
            w = max(w, rng.randint(max(w, int(b.column("ts")[0].as_py())), nxt))
            roll = rng.random()
            if roll < 0.1:
                log.commit()  # a commit without a token
                continue
            if roll < 0.15:
                log.commit(token(None))  # a token without a watermark
                continue
            log.commit(token(w))
            marks.append(w)
            if rng.random() < 0.3:  # quiet: W moves on without a row
                for _ in range(rng.randint(1, 4)):
                    w = rng.randint(w, nxt)
                    log.commit(token(w))
                    marks.append(w)
        log.commit(token(w))  # the same W again: a no-op
        log.seal()
    return marks


def task_loop(op: Any, up_dir: Path, out: StreamLog, after: int | None,
              rng: random.Random, boundaries: list[tuple[int, str]] | None = None,
              *, finish: bool = True, part_rows: int | None = None) -> int:
    """The operator task's loop (cec_spark.run.task): records and tokens after
    ``after``; outputs appended and committed in groups of 1-3; at the end finish, in
    parts of ``part_rows`` (else 1-4) rows, each committed (unless not ``finish``: the
    log is not sealed yet).
    Notes (global byte offset, what the commit ended with) of every commit. Returns
    how many watermarks produced output."""
    closing = 0
    pending = 0
    group = rng.randint(1, 3)
    last_kind = ""

    def commit(kind: str) -> None:
        nonlocal pending, group
        out.commit()
        pending, group = 0, rng.randint(1, 3)
        if boundaries is not None:
            boundaries.append((global_size(log_bytes(out.path)), kind))

    with StreamLog.open(up_dir, threads=0) as up:
        for item in up.follow(after_seq=after).look():
            if isinstance(item, CommitToken):
                w = watermark_of(item)
                applied = op.current_watermark
                if w is None or (applied is not None and w <= applied):
                    continue
                res = op.watermark(w, item.seq)
                kind = "watermark"
                closing += bool(res.num_rows)
            else:
                res = op.process(item)
                kind = "record"
            if res.num_rows:
                out.append(res)
                pending += 1
                last_kind = kind
                if pending >= group:
                    commit(last_kind)
        if pending:
            commit(last_kind)
        if not finish:
            return closing
        # as the task does: the end's closes in parts, each committed (a crash between
        # two parts leaves the rest to the recovery)
        for final in op.finish_parts(part_rows or rng.randint(1, 4)):
            out.append(final)
            commit("finish")
    return closing


WINDOWS: list[WindowSpec] = [TimeWindow(20, 20), TimeWindow(30, 10), SessionWindow(gap_us=8),
                             CountWindow(3, 1)]


def scenario(rng: random.Random, impl: str, window: WindowSpec) -> Scenario:
    policy = PolicyConfig(mode=rng.choice(["targets", "open-only"]),  # type: ignore[arg-type]
                          q=rng.choice([0, 3, "1x", "2x"]), u=rng.choice([0, 5, 50, 10**6]),
                          ci_ms=rng.choice([1.0, 5.0]), cp_ms=rng.choice([10.0, 100.0]))
    return Scenario(window, policy, key_type=rng.choice(["int64", "string"]),
                    function=rng.choice(["avg", "sum", "count", "min", "max"]), impl=impl)


def recover_and_finish(scn: Scenario, up_dir: Path, out_dir: Path, offset: int,
                       dest: Path, rng: random.Random) -> list[pa.RecordBatch]:
    cut_copy(out_dir, dest, offset)
    op = scn.operator()
    res = recover_partition(dest, up_dir, op, fsync="never")
    with res.output_log as out:
        task_loop(op, up_dir, out, res.t_c, rng)
    return read_all(dest)


@pytest.mark.parametrize("impl", sorted(OPERATORS))
@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: type(w).__name__ + str(w))
@pytest.mark.parametrize("seed", range(2))
def test_crash_anywhere_with_watermarks_is_exact(tmp_path: Path, seed: int, impl: str,
                                                 window: WindowSpec) -> None:
    rng = random.Random(3700 + seed)
    scn = scenario(rng, impl, window)
    inputs = make_stream(rng.randint(60, 120), rng.randint(2, 6), seed, ts_step=4,
                         key_type=scn.key_type, max_batch=6)
    marks = write_upstream(tmp_path / "up", inputs, rng)
    assert marks
    op = scn.operator()
    boundaries: list[tuple[int, str]] = []
    with StreamLog.open(tmp_path / "out", writable=True, create=True, fsync="never",
                        segment_bytes=SEGMENT_BYTES) as out:
        closing = task_loop(op, tmp_path / "up", out, None, rng, boundaries, part_rows=1)
    assert op.current_watermark == max(marks)
    want = read_all(tmp_path / "out")
    if not isinstance(window, CountWindow):
        assert closing, "no watermark closed a window: the test tests nothing"
        assert "watermark" in {k for _, k in boundaries}
    end = boundaries[-1][0]
    offsets = [0, *(b for b, _ in boundaries), *(rng.randrange(1, end) for _ in range(6))]
    for j, offset in enumerate(offsets):
        got = recover_and_finish(scn, tmp_path / "up", tmp_path / "out", offset,
                                 tmp_path / f"c{j}", rng)
        for types in ((1,), (2,)):
            assert r_rows(got, types).equals(r_rows(want, types)), (offset, types)


@pytest.mark.parametrize("impl", sorted(OPERATORS))
def test_watermarks_close_what_a_later_tuple_would(tmp_path: Path, impl: str) -> None:
    """The results with watermarks are those without (the export's columns); only
    when they come differs: every time window closed at the end without watermarks
    is closed by one before."""
    rng = random.Random(37)
    scn = Scenario(TimeWindow(20, 20), PolicyConfig(mode="open-only"), impl=impl)
    inputs = make_stream(100, 4, 1, ts_step=4)
    write_upstream(tmp_path / "up", inputs, rng)
    op = scn.operator()
    with StreamLog.open(tmp_path / "out", writable=True, create=True, fsync="never") as out:
        task_loop(op, tmp_path / "up", out, None, rng)
    plain = scn.operator()
    outs = [plain.process(b) for b in inputs]
    outs.append(plain.finish())
    cols = ["key", "win_start", "win_end", "cnt", "value"]

    def results(batches: list[pa.RecordBatch]) -> pa.Table:
        t = r_rows(batches).select(cols)
        return t.sort_by([(c, "ascending") for c in cols])

    got = read_all(tmp_path / "out")
    assert results(got).equals(results(outs))
    finish_rows = np.sum([b.num_rows for b in got[-1:]])
    assert finish_rows < results(outs).num_rows  # the watermarks closed most before the end


class Recording:
    """An operator that notes what the replay hands it (and passes it on)."""

    def __init__(self, op: Any) -> None:
        self.op = op
        self.calls: list[tuple[str, int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.op, name)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        seq = batch.column("seq").to_numpy()
        self.calls.append(("tuples", int(seq[0]), int(seq[-1])))
        return self.op.process(batch)

    def watermark(self, w: int, seq: int) -> pa.RecordBatch:
        self.calls.append(("watermark", w, seq))
        return self.op.watermark(w, seq)


def test_the_replay_delivers_watermarks_at_their_place(tmp_path: Path) -> None:
    """Replayed watermarks (T <= s < t_c) reach the operator in order, each between the
    tuples before and after it, the newest before t_c included; tuples still come in
    large batches (a superseded watermark is not handed over)."""
    rng = random.Random(5)
    scn = Scenario(TimeWindow(2000, 500), PolicyConfig(mode="open-only"), impl="vector")
    inputs = make_stream(3000, 3, 2, ts_step=2, max_batch=8, sparse=False)
    write_upstream(tmp_path / "up", inputs, rng)
    boundaries: list[tuple[int, str]] = []
    with StreamLog.open(tmp_path / "out", writable=True, create=True, fsync="never",
                        segment_bytes=SEGMENT_BYTES) as out:
        task_loop(scn.operator(), tmp_path / "up", out, None, rng, boundaries)
    cut = boundaries[len(boundaries) // 2 + 1][0]  # a crash with windows open
    cut_copy(tmp_path / "out", tmp_path / "cut", cut)
    rec_op = Recording(scn.operator())
    res = recover_partition(tmp_path / "cut", tmp_path / "up", rec_op, fsync="never",
                            filter_replay=False)
    res.output_log.close()
    T, t_c = res.replay_after_seq, res.t_c
    assert T is not None and t_c is not None and t_c - T > 500
    marks = [(w, s) for kind, w, s in rec_op.calls if kind == "watermark"]
    assert marks and all(T <= s < t_c for _, s in marks)
    assert [w for w, _ in marks] == sorted({w for w, _ in marks})
    with StreamLog.open(tmp_path / "up") as up:  # the newest watermark before t_c
        newest = None
        for item in up.read_forward(after_seq=T, tokens=True):
            if isinstance(item, CommitToken) and item.seq < t_c:
                w = watermark_of(item)
                newest = (w, item.seq) if w is not None else newest
    assert newest is not None and marks[-1][0] == newest[0]
    last = T
    for kind, a, b in rec_op.calls:
        if kind == "tuples":
            assert a > last
            last = b
        else:
            assert last <= b  # every tuple before it is at or before its position
            last = b
    assert last == t_c
    batches = [c for c in rec_op.calls if c[0] == "tuples"]
    assert len(batches) <= 2 * len(marks) + 2  # not one per upstream record


@pytest.mark.parametrize("impl", sorted(OPERATORS))
def test_a_quiet_partition_trimmed_up_to_its_last_record_recovers_exactly(
        tmp_path: Path, impl: str) -> None:
    """T = t_c at the partition's last record, later commits tokens only (each ingest
    session in a segment of its own), the upstream trimmed up to T + 1 as the ingest
    trims it: the last record and the token-only segments after it stay, recovery needs
    no tuple, and the resumed task gets every watermark after T."""
    scn = Scenario(TimeWindow(20, 20), PolicyConfig(mode="open-only"), impl=impl)
    ts = np.array([981, 985, 990, 999, 1000], np.int64)
    batch = pa.record_batch({"ts": ts, "seq": np.arange(5, dtype=np.int64) + 5,
                             "key": np.ones(5, np.int64), "value": ts.astype(np.float64)},
                            schema=scn_input_schema())

    def tok(chunk: int, wm: int) -> bytes:
        return encode_token(IngestToken(chunk, chunk, chunk, 0, wm))

    up = tmp_path / "up"
    with StreamLog.open(up, writable=True, create=True, fsync="never") as log:
        log.append(batch)
        log.commit(tok(1, 1000))
    out_dir = tmp_path / "out"
    with StreamLog.open(out_dir, writable=True, create=True, fsync="never") as out:
        task_loop(scn.operator(), up, out, None, random.Random(1), finish=False)  # crash
    with StreamLog.open(up, writable=True, fsync="never") as log:  # quiet: tokens only
        log.commit(tok(2, 1010))
        assert log.trim(before_seq=10) == 0 and log.first_seq == 5  # the last record stays
    for chunk, wm in ((3, 1030), (4, 1031)):
        with StreamLog.open(up, writable=True, fsync="never") as log:
            log.commit(tok(chunk, wm))
    full = tmp_path / "full"
    with StreamLog.open(full, writable=True, create=True, fsync="never") as out:
        op = scn.operator()
        task_loop(op, up, out, None, random.Random(1))
    assert op.current_watermark == 1031
    want = read_all(full)
    assert r_rows(want).column("ts").to_pylist() == [1000, 1030]  # [980, 1000), [1000, 1020)
    op = scn.operator()
    res = recover_partition(out_dir, up, op, fsync="never")
    assert res.t_c == res.replay_after_seq == 9
    with res.output_log as out:
        task_loop(op, up, out, res.t_c, random.Random(1))
    got = read_all(out_dir)
    for types in ((1,), (2,)):
        assert r_rows(got, types).equals(r_rows(want, types))


def scn_input_schema() -> pa.Schema:
    from tests.recovery.harness import input_schema
    return input_schema()


@pytest.mark.parametrize("impl", sorted(OPERATORS))
def test_a_rescaled_partition_with_watermarks_recovers_exactly(tmp_path: Path,
                                                               impl: str) -> None:
    """A new generation's partition: its output log starts with the handoff record
    (the open windows at the cut C, recovery.rescale.handoff), its upstream log with a
    token carrying the cut's W at seq -1 (before C: the resumed task does not need it),
    then the rows after C with their watermarks. Crashes anywhere after the handoff
    recover exactly."""
    rng = random.Random(11)
    scn = Scenario(TimeWindow(30, 10), PolicyConfig(mode="targets", q="1x", u=20),
                   impl=impl, function="sum")
    inputs = make_stream(160, 4, 3, ts_step=4, max_batch=5, sparse=False)
    k = len(inputs) // 2
    before, after = inputs[:k], inputs[k:]
    cut = int(before[-1].column("seq")[-1].as_py())
    last_ts = int(before[-1].column("ts")[-1].as_py())
    old = scn.operator()
    for b in before:
        old.process(b)
    w_cut = last_ts  # every row after the cut is at or after it
    old.watermark(w_cut, cut)
    record = handoff([windows_table(old.state_at(), "int64")], cut=cut, ts=w_cut,
                     partitions=1, groups=1, function="sum", key_type="int64",
                     window_kind="time")[0]
    assert record.num_rows
    up = tmp_path / "up"
    with StreamLog.open(up, writable=True, create=True, fsync="never") as log:
        log.commit(encode_token(IngestToken(0, cut + 1, cut + 1, 0, w_cut)))
    marks = write_upstream(tmp_path / "rest", after, rng)  # the rows after C, with W
    with StreamLog.open(tmp_path / "rest") as rest, \
            StreamLog.open(up, writable=True, fsync="never") as log:
        for item in rest.read_forward(tokens=True):
            if isinstance(item, CommitToken):
                log.commit(item.token)
            else:
                log.append(item)
        log.seal()
    assert marks
    base = tmp_path / "out"
    with StreamLog.open(base, writable=True, create=True, fsync="never") as out:
        out.append(record)
        out.commit()
    full = tmp_path / "full"
    cut_copy(base, full, global_size(log_bytes(base)))
    op = scn.operator()
    res = recover_partition(full, up, op, fsync="never")
    assert res.t_c == res.replay_after_seq == cut
    boundaries: list[tuple[int, str]] = []
    with res.output_log as out:
        task_loop(op, up, out, res.t_c, rng, boundaries)
    want = read_all(full)
    assert "watermark" in {k for _, k in boundaries}
    for j, (offset, _) in enumerate(boundaries[:-1]):
        got = recover_and_finish(scn, up, full, offset, tmp_path / f"c{j}", rng)
        for types in ((1,), (2,)):
            assert r_rows(got, types).equals(r_rows(want, types)), (offset, types)
