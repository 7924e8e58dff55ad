"""The driver: runs a run's plan.

=============  =================================================================================
``runner``     a driver's turn: :func:`run_plan` (a new run) and :func:`resume_run`, the
               session, the checks, the lease's end (:class:`DriverTurn`)
``execution``  :func:`execute`: the two job threads run to their end, watched by the main
               thread (progress, stalls, Ctrl-C), the run's result
``jobs``       the operator job and the ingest job, their retries and resubmits
``progress``   the live progress display and the metrics file: when it looks, the state files
``looks``      run files read again only when a ``stat`` says they changed; the upstream logs
``display``    what the progress view shows: the table, the plain line, compact numbers
``daemon``     Spark's Python worker daemon with cec's modules imported once
``zygote``     a local run's daemon imports begun before the JVM, handed over to Spark's daemon
=============  =================================================================================

First read: ``runner.py``. Only the driver process imports this package (and the worker
daemon, which preloads the executor modules, and the zygote that does it for the daemon).
"""
