"""Commit tokens in stream order: ``read_forward(tokens=True)``, ``tail(tokens=True)``.

A TOKEN frame sits after its commit's records and carries the log's last seq/ts; a
read with tokens yields it between the record batches, in commit order: the tokens
with ``seq >= after_seq`` (all without ``after_seq``). Default reads are unchanged.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from storage_log.cache import index_path
from storage_log.errors import LogTrimmedError, LogUsageError
from storage_log.follow import CommitToken
from storage_log.log import StreamLog
from tests.storage_log.conftest import make_batch, rows

Item = Any  # a pa.RecordBatch or a CommitToken


def shape(items: Any) -> list[tuple[Any, ...]]:
    """Each item as ("T", seq, ts, token) or ("R", first seq, last seq)."""
    out: list[tuple[Any, ...]] = []
    for it in items:
        if isinstance(it, CommitToken):
            out.append(("T", it.seq, it.ts, it.token))
        else:
            seq = it.column("seq").to_pylist()
            out.append(("R", seq[0], seq[-1]))
    return out


def records_only(items: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [i for i in items if i[0] == "R"]


def write_interleaved(log: StreamLog) -> None:
    """t0 before any record; records 0-4 with t1; token-only t2; records 5-9 in two
    records and no token; token-only t3, t4 (ts = 10 * seq)."""
    log.commit(b"t0")
    log.append(make_batch(0, 5))
    log.commit(b"t1")
    log.commit(b"t2")
    log.append(make_batch(5, 3))
    log.append(make_batch(8, 2))
    log.commit()
    log.commit(b"t3")
    log.commit(b"t4")


FULL = [("T", -1, -1, b"t0"), ("R", 0, 4), ("T", 4, 40, b"t1"), ("T", 4, 40, b"t2"),
        ("R", 5, 7), ("R", 8, 9), ("T", 9, 90, b"t3"), ("T", 9, 90, b"t4")]


@pytest.mark.parametrize("threads", [0, 2])
def test_token_only_commits_interleaved_with_records(log_dir: Path, threads: int) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        write_interleaved(w)
        assert shape(w.read_forward(tokens=True)) == FULL
    with StreamLog.open(log_dir, threads=threads) as r:
        assert shape(r.read_forward(tokens=True)) == FULL
        assert shape(r.read_forward(after_seq=None, tokens=True)) == FULL
        # without tokens: the records, exactly as before
        assert shape(r.read_forward()) == records_only(FULL)
        assert rows(r.read_forward(after_seq=3)) == list(range(4, 10))
        assert r.last_token() == b"t4"


@pytest.mark.parametrize(("after", "expected"), [
    (-1, FULL),  # before the first record: the token at seq -1 too
    (0, [("R", 1, 4), *FULL[2:]]),  # inside a record: the record cut, its tokens after
    (3, [("R", 4, 4), *FULL[2:]]),
    (4, FULL[2:]),  # at a token's seq: the tokens there are delivered
    (5, [("R", 6, 7), *FULL[5:]]),  # after it: not
    (7, FULL[5:]),  # at the end of a record without a token
    (9, FULL[6:]),  # at the log's last seq: its trailing tokens
    (10, []),  # after everything
    (1000, []),
])
def test_after_seq_at_before_after_a_token(log_dir: Path, after: int,
                                           expected: list[tuple[Any, ...]]) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        write_interleaved(w)
    with StreamLog.open(log_dir) as r:
        assert shape(r.read_forward(after_seq=after, tokens=True)) == expected
        assert shape(r.read_forward(after_seq=after)) == records_only(expected)


def test_a_log_of_tokens_only(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        assert list(w.read_forward(tokens=True)) == []
        w.commit(b"a")
        w.commit(b"b")
    with StreamLog.open(log_dir, writable=True) as w:  # a new writer: a segment of its own
        w.commit(b"c")
    with StreamLog.open(log_dir) as r:
        want = [("T", -1, -1, b"a"), ("T", -1, -1, b"b"), ("T", -1, -1, b"c")]
        assert shape(r.read_forward(tokens=True)) == want
        assert shape(r.read_forward(after_seq=-1, tokens=True)) == want
        assert shape(r.read_forward(after_seq=0, tokens=True)) == []
        assert list(r.read_forward()) == []


def test_tokens_of_a_new_writer_in_its_own_segment(log_dir: Path) -> None:
    """A writer's first write starts a segment of its epoch: a token-only commit there
    still follows the last record of the previous segment."""
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 4))
        w.commit(b"a")
    with StreamLog.open(log_dir, writable=True) as w:
        w.commit(b"b")
        w.append(make_batch(4, 2))
        w.commit(b"c")
    assert len(list(log_dir.glob("*.seg"))) == 2
    with StreamLog.open(log_dir) as r:
        assert shape(r.read_forward(after_seq=3, tokens=True)) == [
            ("T", 3, 30, b"a"), ("T", 3, 30, b"b"), ("R", 4, 5), ("T", 5, 50, b"c")]
        assert shape(r.read_forward(after_seq=4, tokens=True)) == [
            ("R", 5, 5), ("T", 5, 50, b"c")]


def test_from_ts_with_tokens_is_refused(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        write_interleaved(w)
        with pytest.raises(LogUsageError):
            w.read_forward(from_ts=0, tokens=True)


def test_trimmed_segments(log_dir: Path) -> None:
    """Trim drops whole segments with their tokens and re-commits the latest token in
    the kept ones: a read after the trim point gets it again at the end (a duplicate,
    which consumers treat as a no-op); a read inside the trimmed part is refused."""
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        seq = 0
        while len(list(log_dir.glob("*.seg"))) < 4:
            w.append(make_batch(seq, 20))
            seq += 20
            w.commit(f"k{seq - 1}".encode())
            w.commit(f"again{seq - 1}".encode())
        last = seq - 1
        full = shape(w.read_forward(tokens=True))
        assert full[-1] == ("T", last, 10 * last, f"again{last}".encode())
        bases = sorted(int(p.name.split("-")[0]) for p in log_dir.glob("*.seg"))
        assert w.trim(before_seq=bases[2]) == 2
        kept = shape(w.read_forward(tokens=True))
        # what was committed from the first kept record on, then the re-committed token
        first_kept = full.index(("R", bases[2], bases[2] + 19))
        assert kept == [*full[first_kept:], ("T", last, 10 * last, f"again{last}".encode())]
        after = bases[2] - 1  # the trim point: the records after it are all kept
        assert shape(w.read_forward(after_seq=after, tokens=True)) == kept
        with pytest.raises(LogTrimmedError):
            list(w.read_forward(after_seq=5, tokens=True))
    with StreamLog.open(log_dir) as r:
        assert shape(r.read_forward(tokens=True)) == kept
        assert shape(r.read_forward(after_seq=last, tokens=True)) == [
            ("T", last, 10 * last, t) for t in (f"k{last}".encode(), *[
                f"again{last}".encode()] * 2)]


def test_follower_reads_on_from_where_it_ended(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w, \
            StreamLog.open(log_dir) as r:
        f = r.follow(after_seq=None)
        assert list(f.look()) == []
        w.append(make_batch(0, 3))
        w.commit(b"a")
        assert shape(f.look()) == [("R", 0, 2), ("T", 2, 20, b"a")]
        assert f.after_seq == 2
        assert list(f.look()) == []  # nothing new: the token is not read again
        for i in range(5):
            w.commit(f"q{i}".encode())
        assert shape(f.look()) == [("T", 2, 20, f"q{i}".encode()) for i in range(5)]
        w.commit(b"q5")
        assert shape(f.look()) == [("T", 2, 20, b"q5")]
        w.append(make_batch(3, 1))
        w.commit()
        w.seal()
        assert shape(f.look()) == [("R", 3, 3)]
        assert list(f.look()) == []


def test_a_tailing_reader_sees_a_token_only_commit(log_dir: Path) -> None:
    got: list[Item] = []
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 2))
        w.commit(b"start")
        with StreamLog.open(log_dir) as r:
            def follow() -> None:
                for item in r.tail(after_seq=1, timeout=30, tokens=True):
                    got.append(item)
                    if isinstance(item, CommitToken) and item.token == b"quiet":
                        return

            t = threading.Thread(target=follow)
            t.start()
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                time.sleep(0.005)
            w.commit(b"quiet")  # a token, no record
            t.join(30)
            assert not t.is_alive()
    assert shape(got) == [("T", 1, 10, b"start"), ("T", 1, 10, b"quiet")]


def test_tail_with_tokens_ends_at_the_seal(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        write_interleaved(w)
        w.seal()
    with StreamLog.open(log_dir) as r:
        assert shape(r.tail(after_seq=None, timeout=30, tokens=True)) == FULL
        assert shape(r.tail(after_seq=9, timeout=30, tokens=True)) == FULL[6:]
        assert shape(r.tail(after_seq=None, timeout=30)) == records_only(FULL)


def test_torn_tail_after_a_token(tmp_path: Path) -> None:
    """A writer killed while writing the commit after a token-only commit: the next
    writer cuts the torn bytes; the token and what came before it are read as
    committed, and the writer carries on."""
    base = tmp_path / "base"
    with StreamLog.open(base, writable=True, create=True) as w:
        w.append(make_batch(0, 4))
        w.commit(b"a")
        w.commit(b"b")  # token-only
    (seg,) = base.glob("*.seg")
    good = seg.read_bytes()
    full = tmp_path / "full"
    shutil.copytree(base, full)
    shutil.copytree(index_path(base), index_path(full))
    with StreamLog.open(full, writable=True) as w:
        w.append(make_batch(4, 2))
        w.commit(b"c")
        w.commit(b"d")
    segs = sorted(full.glob("*.seg"))
    assert len(segs) == 2 and segs[0].read_bytes() == good
    torn = segs[1].read_bytes()
    want = [("R", 0, 3), ("T", 3, 30, b"a"), ("T", 3, 30, b"b")]
    more = [("R", 4, 5), ("T", 5, 50, b"c")]  # committed when the cut is in d's frame
    seen = set()
    for cut in [*range(0, len(torn), 7), len(torn) - 1]:
        case = tmp_path / f"c{cut}"
        shutil.copytree(full, case)
        (case / segs[1].name).write_bytes(torn[:cut])
        with StreamLog.open(case) as r:  # a reader stops at the torn bytes
            got = shape(r.read_forward(tokens=True))
            assert got in (want, want + more)
        with StreamLog.open(case, writable=True) as w:
            assert shape(w.read_forward(tokens=True)) == got
            assert w.last_token() == got[-1][3]
            seen.add(len(got))
            last = got[-1][1]
            w.append(make_batch(last + 1, 1))
            w.commit(b"e")
            assert shape(w.read_forward(after_seq=3, tokens=True)) == [
                *got[1:], ("R", last + 1, last + 1), ("T", last + 1, 10 * (last + 1), b"e")]
        shutil.rmtree(index_path(case), ignore_errors=True)
        shutil.rmtree(case)
    assert seen == {3, 5}


def test_a_torn_token_frame_is_not_a_token(tmp_path: Path) -> None:
    """The token frame itself torn at every byte: never a token, the commit before it
    stands."""
    base = tmp_path / "base"
    with StreamLog.open(base, writable=True, create=True) as w:
        w.append(make_batch(0, 4))
        w.commit(b"a")
    (seg,) = base.glob("*.seg")
    good = seg.read_bytes()
    with StreamLog.open(base, writable=True) as w:
        pass
    shutil.rmtree(index_path(base))
    with StreamLog.open(base, writable=True) as w:
        w.commit(b"watermark")  # a segment of its own: TOKEN frame only
    second = [p for p in base.glob("*.seg") if p.name != seg.name]
    assert len(second) == 1 and seg.read_bytes() == good
    torn = second[0].read_bytes()
    for cut in range(len(torn)):
        case = tmp_path / f"c{cut}"
        shutil.copytree(base, case)
        (case / second[0].name).write_bytes(torn[:cut])
        with StreamLog.open(case) as r:
            assert shape(r.read_forward(after_seq=3, tokens=True)) == [("T", 3, 30, b"a")]
        shutil.rmtree(index_path(case), ignore_errors=True)
        shutil.rmtree(case)


def test_a_trim_keeps_the_last_record_and_the_tokens_after_it(log_dir: Path) -> None:
    """A quiet log: its last record, then writers that commit tokens only (each in a
    segment of its own). A trim up to (or past) that record keeps its segment and the
    token-only ones: a read after the record's seq gets every token committed since,
    and the log still has its last record (a writable open knows its last seq)."""
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 10))
        w.commit(b"a")
    with StreamLog.open(log_dir, writable=True) as w:
        w.append(make_batch(10, 10))
        w.commit(b"b")
    for t in (b"c", b"d"):
        with StreamLog.open(log_dir, writable=True) as w:
            w.commit(t)
    assert len(list(log_dir.glob("*.seg"))) == 4
    after = [("T", 19, 190, t) for t in (b"b", b"c", b"d", b"d")]  # d again: trim's
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.trim(before_seq=20) == 1
        assert w.first_seq == 10 and w.last_seq == 19
        assert shape(w.read_forward(after_seq=19, tokens=True)) == after
    shutil.rmtree(index_path(log_dir))  # the next open rebuilds the index
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.first_seq == 10 and w.last_seq == 19
        assert w.trim(before_seq=1000) == 0  # past the last record: it stays
        w.append(make_batch(20, 1))  # and the writer carries on
        w.commit(b"e")
    with StreamLog.open(log_dir) as r:
        assert shape(r.read_forward(after_seq=19, tokens=True)) == [
            *after, ("R", 20, 20), ("T", 20, 200, b"e")]
        assert rows(r.read_forward()) == list(range(10, 21))
