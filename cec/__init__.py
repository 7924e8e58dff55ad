"""cec: continuous eventual checkpointing for windowed stream operators (the core).

The pure logic of the design (/work/shared/DESIGN.md, docs/ARCHITECTURE.md §3–4): the
records an operator reads and writes, its windows, aggregates and checkpoint policy,
the operator itself (a per-tuple oracle and the vectorized one production runs), the
pipeline spec, and the project's one error tree. No Spark, no files (the spec parser
reads only the spec): ``cec`` imports ``storage_log`` and nothing above it
(``tests/test_layers.py``), so recovery and the Spark runtime build on it.

First read ``records.py`` (what flows in and out), then ``operator/base.py`` (the
semantics) and ``operator/vector.py`` (the hot path).

================  ==============================================================
``records``       input tuples and output rows: the output log's schema, R/G types,
                  input decoding and order checks
``window_state``  the one list of a window's state fields, which every form of the
                  state (schema, AggState, snapshots, slot arrays) derives from
``windows``       count and time windows, tumbling and sliding: which windows a tuple
                  belongs to (:data:`~cec.windows.WindowSpec`)
``aggregates``    the partial aggregate :class:`~cec.aggregates.AggState` and the
                  reducers (count, sum, min, max, avg)
``policy``        when to emit ``G_check`` footprints and how much time they may take
                  (modes ``none``, ``open-only``, ``targets``)
``durations``     the one parser of durations (``"10s"``, ``"1 minute"``), in µs
``order``         stable orders of integer keys by counting passes (the ingest's
                  split by partition, ``cec export``'s order)
``ingest_token``  the ingest's commit token on every upstream log (chunk, seq end,
                  late rows, watermark): one paired ``encode_token``/``decode_token``
``errors``        the one error tree: :class:`CecError` at the root (declared in
                  ``storage_log.errors``), every class with its exit status
``operator/``     the CEC aggregate operator: ``base`` (interface, semantics),
                  ``reference`` (the oracle), ``vector`` (production) and its
                  storage, kernels, rows, EC load/dump, snapshots (``state``)
``spec/``         the pipeline spec: TOML → frozen dataclasses, and back
``__main__``      ``python -m cec``: the command line (a program, not a module)
================  ==============================================================

Choices made here: a window keeps ``cnt`` and the fields its function reads (record
format 2, docs/ARCHITECTURE.md §3; logs of format 1 carry all six: ``cnt``, ``sum``,
``min``, ``max``, ``first_ts``, ``last_ts``), so a footprint row restores its
aggregate; floats are added one tuple at a time in input order, so both
operators give bit-identical rows; every error a user can meet is a :class:`CecError`
whose class carries the exit status.
"""

from cec.errors import CecError

__all__ = ["CecError"]
__version__ = "0.1.0"
