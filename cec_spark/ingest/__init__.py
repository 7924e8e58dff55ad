"""The ingest: source → Spark (read, filter, key partition) → one upstream log per partition.

=============  ==================================================================================
``job``        the ingest job: chunks planned from the run's plan, run as Spark jobs, logs sealed
``stream``     a stream folder's long-lived ingest: one Spark task, no job per poll (issue 28)
``query``      the query of a job: the direct one (a task reads, filters, partitions, writes)
               or Spark's (chunks read in a task, filtered, projected, key-partitioned in SQL)
``project``    the rows filtered, projected and key-partitioned in Python (Spark's semantics)
``writer``     the ``mapInArrow`` writer: appends to the upstream logs, commits with chunk tokens
``feeder``     whether the JVM feeding a writer still runs (an input cut by its death is no end)
``logs``       the upstream logs' lifecycle: created, trimmed, sealed; the resume point and late
               rows their last tokens (:mod:`cec.ingest_token`) give
``watermark``  the W committed with every log after each chunk (and within one, and when an
               idle stream folder's ``idle_close`` passes): every row below it is released
``where``      ``[filter].where`` compiled once by Spark; ``where_eval`` runs it on Arrow, no Spark
=============  ==================================================================================

First read: ``job.py``. Exactly once: each upstream log's commit token names the last
source chunk it holds and, within the next one, the row below which it holds every row
of its partition, so a resumed ingest goes on from the smallest such row.
"""
