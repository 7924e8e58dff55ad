"""What reads a run's results and logs, never writing to them (acks aside).

==============  ================================================================================
``export``      ``cec export``: every result as one CSV or parquet file; consumers' acks
``datasource``  ``spark.read.format("cec")`` and ``readStream``
``inspect``     ``cec inspect extent`` and ``cec inspect log``
==============  ================================================================================

First read: ``export.py``. Needs only the run directory; reads committed records only,
so a live run can be read.
"""
