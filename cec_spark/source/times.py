"""Source times: what a time field may hold and its one conversion to int64 microseconds.

A time field is one of three **kinds**, fixed by the source's first chunk and stored
with the run's column types (``run.toml``):

``int64``      integer epochs in ``[source].time_unit`` (``s``, ``ms``, ``us``, ``ns``;
               default ``us``)
``timestamp``  a TIMESTAMP column (parquet, e.g. written by Spark: INT96 or INT64
               timestamps of any unit, with or without a time zone)
``iso``        ISO-8601 text (csv, jsonl): ``2024-05-01T12:00:00.25Z``,
               ``...+02:00``; a time without an offset is UTC

Every one becomes int64 microseconds since the epoch (UTC) before anything else sees it
(the filter, the key partition, the logs). Finer values (``ns`` epochs, nanosecond
timestamps, more than six fractional digits) are **floored** to the microsecond:
window bounds are whole microseconds, so a floored time falls in exactly the windows
its exact time falls in; only the first/last-tuple bounds of a count window lose the
sub-microsecond digits. A value that does not fit int64 microseconds, or text that is
no ISO-8601 time, is an :class:`~cec_spark.errors.InputError` naming the file,
line or row and the field.

:func:`unit_warnings` is the guess check: nothing is guessed, but a time field whose
values look like another unit's epochs, or a source far shorter than one window, is
reported (on stderr, in the run's result and in ``cec inspect extent``).
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cec.windows import WindowSpec

TIME_KINDS = ("int64", "timestamp", "iso")
UNIT_US = {"s": 1_000_000, "ms": 1_000, "us": 1}  # ns: floor-divided by 1000
_INT64_MAX = (1 << 63) - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)
# the raw magnitudes of epochs between 1973 and 2286 in each unit
_EPOCH_RANGES = (("s", 1e8, 1e10), ("ms", 1e11, 1e13), ("us", 1e14, 1e16),
                 ("ns", 1e17, 1e19))


class TimeValueError(ValueError):
    """A value of the time field that has no microsecond time: row ``index`` of the
    array converted, what it held, why.

    Internal, so not a :class:`~cec.errors.CecError`: this module sees an array, not a
    file; its callers turn it into an :class:`~cec_spark.errors.InputError` naming the
    file, line and field (:mod:`cec_spark.source.read`) or a ``UsageError`` naming the
    option (the data source's ``asOf``), so it never reaches a user as it is."""

    def __init__(self, index: int, shown: object, why: str) -> None:
        super().__init__(why)
        self.index, self.shown, self.why = index, shown, why


def kind_of(t: pa.DataType) -> str | None:
    """The time kind of an Arrow column type (None: no time)."""
    if pa.types.is_integer(t):
        return "int64"
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "timestamp"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "iso"
    return None


def _first_null(arr: pa.Array) -> None:
    if arr.null_count:
        i = int(pc.index(pc.is_null(arr), True).as_py())
        raise TimeValueError(i, None, "missing value")


def _ints_to_us(values: np.ndarray, unit: str) -> np.ndarray:
    if unit == "ns":
        return np.asarray(np.floor_divide(values, 1000), np.int64)
    factor = UNIT_US[unit]
    if factor == 1:
        return values
    lim = _INT64_MAX // factor
    bad = np.flatnonzero((values > lim) | (values < -lim))
    if len(bad):
        i = int(bad[0])
        raise TimeValueError(i, int(values[i]), f"does not fit int64 microseconds as "
                             f"epoch {unit} (time_unit)")
    return values * factor


def _iso_to_us(arr: pa.Array) -> np.ndarray:
    """ISO-8601 strings: Arrow's parser (with an offset, or all naive = UTC), else
    Python's, value by value (mixed forms, years outside 1677-2262, or a bad value)."""
    for t in (pa.timestamp("ns", tz="UTC"), pa.timestamp("ns")):
        try:
            ns = pc.cast(arr, t).cast(pa.int64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        return np.asarray(np.floor_divide(ns, 1000), np.int64)
    out = np.empty(len(arr), np.int64)
    for i, text in enumerate(arr.to_pylist()):
        try:
            when = dt.datetime.fromisoformat(text.strip())
        except (ValueError, AttributeError):
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise TimeValueError(i, shown, "is not an ISO-8601 time (like "
                                 "2024-05-01T12:00:00Z)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        out[i] = (when - _EPOCH) // _US
    return out


def to_us(arr: pa.Array | pa.ChunkedArray, kind: str, unit: str) -> np.ndarray:
    """The microseconds of a time column of ``kind`` (``unit``: an ``int64`` kind's)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    _first_null(arr)
    t = arr.type
    if kind == "int64":
        if not pa.types.is_integer(t):
            i = 0
            if pa.types.is_floating(t):  # name the first value that is not whole
                whole = pc.equal(pc.floor(arr), arr)
                i = int(pc.index(whole, False).as_py()) if not pc.all(whole).as_py() else 0
            raise TimeValueError(i, arr[i].as_py(), f"is not an integer (epoch {unit}, "
                                 "[source].time_unit)")
        return _ints_to_us(arr.cast(pa.int64()).to_numpy(), unit)
    if kind == "timestamp":
        if pa.types.is_date(t):
            arr = arr.cast(pa.timestamp("ms"))
            t = arr.type
        if not pa.types.is_timestamp(t):
            raise TimeValueError(0, arr[0].as_py(), "is not a TIMESTAMP (the first file's "
                                 "time field was)")
        raw = arr.cast(pa.int64()).to_numpy()  # the instant's count in its unit, UTC
        return _ints_to_us(raw, t.unit)
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise TimeValueError(0, arr[0].as_py(), "is not ISO-8601 text (the first file's "
                             "time field was)")
    return _iso_to_us(arr)


def iso(us: int) -> str:
    """``2024-05-01T12:00:00.250000Z`` (for messages)."""
    try:
        return (_EPOCH + dt.timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except OverflowError:
        return f"{us} us"


def duration_text(us: int) -> str:
    for div, name in ((86_400_000_000, "d"), (3_600_000_000, "h"), (60_000_000, "min"),
                      (1_000_000, "s"), (1_000, "ms")):
        if abs(us) >= div:
            return f"{us / div:.3g} {name}"
    return f"{us} us"


def unit_warnings(field: str, kind: str, unit: str, raw_max_abs: int | None,
                  min_us: int | None, max_us: int | None, rows: int,
                  window: WindowSpec) -> list[str]:
    """What looks wrong about the time unit (nothing is changed: a warning only).

    ``raw_max_abs``: the largest magnitude of the field's raw integers (``int64`` kind);
    ``min_us``/``max_us``: the smallest and largest time after the conversion.
    """
    out: list[str] = []
    if kind == "int64" and raw_max_abs is not None:
        for name, lo, hi in _EPOCH_RANGES:
            if lo <= raw_max_abs < hi and name != unit:
                assert max_us is not None
                out.append(
                    f"[source].{field}: values like {raw_max_abs} look like epoch "
                    f"{name}, but time_unit = \"{unit}\" reads them as {iso(max_us)}; set "
                    f"time_unit = \"{name}\" if they are {name}")
                break
    if (window.kind == "time" and rows > 1 and min_us is not None and max_us is not None
            and max_us - min_us > 0 and (max_us - min_us) * 10 < window.size):
        out.append(f"[source].{field}: the source spans {duration_text(max_us - min_us)}, less "
                   f"than a tenth of one window ({duration_text(window.size)}); is "
                   f"[source].time_unit (\"{unit}\") right?" if kind == "int64" else
                   f"[source].{field}: the source spans {duration_text(max_us - min_us)}, less "
                   f"than a tenth of one window ({duration_text(window.size)})")
    return out
