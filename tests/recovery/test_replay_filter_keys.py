"""The replay filter matches keys by value whatever their Arrow type (issue 17 item 13):
int32 against int64, binary against string; a key kind that cannot match (ints against
strings) is an error, never a silent skip of the replayed tuples."""

from __future__ import annotations

import pyarrow as pa
import pytest

from recovery.errors import InconsistentLogError
from recovery.upstream import ReplayFilter


def _ec(keys: pa.Array) -> pa.Table:
    return pa.table({"key": keys, "t_now": pa.array([5, 9, 7], pa.int64())})


def _batch(keys: pa.Array) -> pa.RecordBatch:
    return pa.record_batch({"seq": pa.array([4, 6, 10, 11], pa.int64()), "k": keys})


@pytest.mark.parametrize(("ec_keys", "replayed"), [
    (pa.array([1, 2, 1], pa.int64()), pa.array([1, 1, 2, 3], pa.int32())),
    (pa.array([1, 2, 1], pa.int32()), pa.array([1, 1, 2, 3], pa.uint64())),
    (pa.array(["a", "b", "a"]), pa.array([b"a", b"a", b"b", b"c"], pa.binary())),
    (pa.array([b"a", b"b", b"a"], pa.binary()), pa.array(["a", "a", "b", "c"],
                                                          pa.large_string())),
])
def test_keys_match_by_value_across_types(ec_keys: pa.Array, replayed: pa.Array) -> None:
    f = ReplayFilter(_ec(ec_keys), "k")
    # key 1/"a": oldest footprint 5 -> seq 4 not needed, 6 needed; key 2/"b": oldest 9 ->
    # seq 10 needed; key 3/"c" has no EC window -> not needed
    assert f.needed(_batch(replayed)).tolist() == [False, True, True, False]


def test_ints_against_strings_is_an_error() -> None:
    f = ReplayFilter(_ec(pa.array([1, 2, 1], pa.int64())), "k")
    with pytest.raises(InconsistentLogError, match="holds string keys but the eventual "
                       "checkpoint's keys are ints"):
        f.needed(_batch(pa.array(["1", "1", "2", "3"])))


def test_bytes_that_are_not_utf8_are_an_error() -> None:
    f = ReplayFilter(_ec(pa.array(["a", "b", "a"])), "k")
    with pytest.raises(InconsistentLogError, match="not UTF-8"):
        f.needed(_batch(pa.array([b"\xff", b"a", b"b", b"c"], pa.binary())))
