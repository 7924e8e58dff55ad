"""The ingest: source → Spark (read, filter, key partition) → one upstream log per partition.

==========  ====================================================================================
``job``     the ingest job: chunks planned from the run's plan, run as Spark jobs, logs sealed
``stream``  a stream folder's long-lived ingest: one Spark task, no job per poll (issue 28)
``query``   the Spark query: chunks read in a task, filtered, projected, key-partitioned
``writer``  the ``mapInArrow`` writer: appends to the upstream logs, commits with chunk tokens
``where``   ``[filter].where`` compiled once by Spark; ``where_eval`` runs it on Arrow, no Spark
==========  ====================================================================================

First read: ``job.py``. Exactly once: each upstream log's commit token names the last
source chunk it holds, so a resumed ingest goes on from there.
"""
