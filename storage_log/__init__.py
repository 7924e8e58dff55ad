"""storage_log: the checksummed, LMDB-indexed, append-only stream log.

The public API is :class:`storage_log.log.StreamLog` (docs/ARCHITECTURE.md §2). The
package is a flat set of nouns, like Kafka's log layer:

=============  ==============================================================
``framing``    a frame on disk: its byte layout, the header and footer around a
               payload: pack, parse, validate
``payload``    what a frame carries: records encoded and decoded (:class:`PayloadCodec`)
``columnar``   the columnar payload encodings of numeric records (pure)
``segment``    segment files: naming, listing, chunked forward/backward walks
``index``      the LMDB index and metadata (:class:`LogIndex`), a rebuildable cache
``entry``      what the index stores: record entries, the committed end, snapshots
``walk``       walking segments to find commits; torn tail or damage
``epoch``      writer epochs: fencing a zombie writer; a damaged epoch file rebuilt
``cache``      where a host keeps its index of a log (``log.id``)
``sidefile``   index side-files of complete segments (``*.seg.idx``)
``durable``    the durable write of a small file (tmp, fsync, replace, fsync the folder)
``scan``       every reader's index: the host's LMDB index continued by a walk
``reconcile``  the writable open: cut a torn tail, re-index, rebuild (Kafka LogLoader)
``appender``   the write side: pending frames, segment roll, fsync
``reader``     the read side: forward, backward, verify, read-ahead decoding
``reads``      the read API ``StreamLog`` derives (``read_forward``, ``read_backward``,
               ``tail``, ``follow``, ``verify``)
``follow``     the commit tokens in stream order (:class:`CommitToken`) and a reader
               that reads on from where its last look ended (:class:`Follower`)
``notify``     waiting for a log's next commit (inotify, a poll as the fallback)
``batch``      what an append accepts: a batch's schema and positions
``lock``       the single-writer lock (``flock`` + pid)
``faults``     named crash points: a test kills the process -9 at one (off: one lookup)
``log``        :class:`StreamLog`, the API the other packages use
``errors``     the root ``CecError`` of the project's one error tree; the log's errors
               (``StorageLogError`` s), each with its exit code
=============  ==============================================================

Choices the architecture leaves open, made here:

* A record is one zstd-compressed Arrow IPC record-batch message, or, when all its
  columns are non-null integers or floats and it has 256 rows or more, a columnar
  encoding of them (``columnar``: zstd-compressed as a whole, or from 4096 rows
  bit-packed and compressed column by column); the schema is written once per
  segment (a SCHEMA frame) and kept in the LMDB metadata, so framing costs exactly
  64 bytes per record.
* A commit is marked in the segments themselves (a COMMIT flag on the last frame,
  a TOKEN frame for the token, a SEAL frame for the end of stream), so the
  segments alone determine the committed log, token and seal; the index is only a
  cache. Records written but never committed are cut on the next writable open.
* ``seq`` must be >= 0 (segment files are named by it).
* Readers of a log without a usable index walk the segments read-only.
* ``read_forward(tokens=True)`` and ``tail(tokens=True)`` yield, between the record
  batches and in commit order, a ``CommitToken(seq, ts, token)`` for every commit that
  carried a token (also one with no new record): ``seq``/``ts`` are the log's last
  record's at that commit (-1/-1 before any), a token at ``seq == after_seq`` is
  delivered (it follows the record holding it). The latest token may come twice
  after a trim (re-committed into a kept segment). Without ``tokens`` nothing changes.
* ``close()`` does not commit: a writer's uncommitted appends are dropped.
* Extras beyond the contract: ``StreamLog.open(..., fsync_interval=, threads=,
  compression_level=)``, ``StreamLog.verify()``, ``uncommitted_bytes``,
  ``committed_seq``, ``reconcile_report``; errors ``LogSchemaError``,
  ``LogSealedError``, ``LogNotFoundError``, ``LogTrimmedError``, ``LogClosedError``.
"""

from storage_log.appender import FSYNC_MODES, FsyncMode
from storage_log.errors import (
    CorruptLogError,
    LogClosedError,
    LogLockedError,
    LogNotFoundError,
    LogOrderError,
    LogSchemaError,
    LogSealedError,
    LogTrimmedError,
    LogUsageError,
    LogWriteError,
    StorageLogError,
)
from storage_log.follow import CommitToken
from storage_log.log import StreamLog
from storage_log.reconcile import ReconcileReport

__all__ = [
    "FSYNC_MODES",
    "CommitToken",
    "CorruptLogError",
    "FsyncMode",
    "LogClosedError",
    "LogLockedError",
    "LogNotFoundError",
    "LogOrderError",
    "LogSchemaError",
    "LogSealedError",
    "LogTrimmedError",
    "LogUsageError",
    "LogWriteError",
    "ReconcileReport",
    "StorageLogError",
    "StreamLog",
]
