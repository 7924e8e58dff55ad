"""What a run is made of, decided and started before its jobs run.

================  ===============================================================================
``plan``          :class:`RunPlan`: the spec, the overrides, the run directory, the source, made
                  once
``slots``         task slots: what a run needs of the cluster, and when to start, wait or fail
                  (pure)
``cluster``       waiting for the slots before the run, and watching for lost slots while it runs
``standalone``    a standalone master's view of the application (its RPC and ``/json/`` page)
``probe``         the visibility probe: every executor sees the run directory and the source
``rto``           the recovery-time objective at start-up: the fixed cost, the floor, the check
``rto_task``      :class:`RtoTask`: the objective in a running task, measured rates, retuning
``session``       the SparkSession, configured for long-lived tasks and Arrow; the early start
``lazy_session``  :class:`LazySession`: the SparkContext now, the SQL session at its first use
``jvm_archive``   class-data sharing for the driver JVM
``task``          the long-lived operator task: upstream log to output log, recovery on restart
``upstream``      the task's tail of its upstream log: when it looks, how long it sleeps
``trim``          what the task lets be trimmed: :class:`ReplayAfterSeq`, :class:`OutputKeeper`
``operators``     the operator a task runs, built from the spec, its windows' memory bounded
``counters``      :class:`TaskCounters`: what a task reports, declared once
``metrics``       the Prometheus textfile of a run
================  ===============================================================================

First read: ``plan.py``, then ``task.py``. On executors run ``task`` (with ``upstream``,
``trim`` and ``operators``), ``counters``, ``rto_task`` (and the ``rto`` it reads the
fixed cost with) and the probe's task; the rest runs in the driver.
"""
