"""The driver: runs a run's plan.

============  ==================================================================================
``runner``    :func:`run_plan`: the session, the checks, the two job threads, the result
``jobs``      the operator job and the ingest job, their retries and resubmits
``progress``  the live progress display and the metrics file
``daemon``    Spark's Python worker daemon with cec's modules imported once
============  ==================================================================================

First read: ``runner.py``. Only the driver process imports this package (and the worker
daemon, which preloads the executor modules).
"""
