"""What reads a run's results and logs, never writing to them (acks aside).

================  ==============================================================================
``export``        ``cec export``: every result as one CSV or parquet file; consumers' acks
``sorted_runs``   the export's order in bounded memory: sorted runs spilled, then merged
``export_ahead``  ``cec run pipeline --out``: the export read while the run goes on
``datasource``    ``spark.read.format("cec")`` and ``readStream``
``inspect``       ``cec inspect extent`` and ``cec inspect log``
``tail``          ``cec tail``: each result printed as soon as it is durable; exactly once
                  with ``--consumer``
================  ==============================================================================

First read: ``export.py``. Needs only the run directory; reads committed records only,
so a live run can be read (and followed: ``tail``).
"""
