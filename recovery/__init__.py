"""recovery: rebuild the eventual checkpoint from an output log and replay exactly.

Modules, one concept each:

* :mod:`recovery.ec`: EC reconstruction, a pure backward scan (vectorized, plus the
  per-row oracle :func:`~recovery.ec.reconstruct_reference`); time travel.
* :mod:`recovery.followed`: the same EC kept up to date reading forward (a hot
  standby's task follows its output log with it), equal to the backward scan's.
* :mod:`recovery.checkpoint`: its result (``EventualCheckpoint``, ``ExtentMetrics``,
  ``Footprint``, ``NothingToRecover``).
* :mod:`recovery.upstream`: the replay of ``(T, t_c]`` from the upstream log through
  a loaded operator (reconstruction mode), with the exact replay filter.
* :mod:`recovery.partition`: recovery of one partition: reconcile, scan, load, replay
  (``recover_partition``, ``recover_from_logs``, ``predict`` (a dry run), ``scan``,
  ``boundary_seq``).
* :mod:`recovery.explain`: the recovery explain and the phase-time model.
* :mod:`recovery.rescale`: rescale, the pure part: key groups (Spark's ``xxhash64``)
  and the handoff of the open windows at a common cut to the new partitions.
* :mod:`recovery.errors`: ``ExtentError``, ``InconsistentLogError``,
  ``ReplayUnavailableError`` (all exit status 4).
"""
