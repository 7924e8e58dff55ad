"""What a run is made of, decided and started before its jobs run.

===============  ===============================================================================
``plan``         :class:`RunPlan`: the spec, the overrides, the run directory, the source, made
                 once
``cluster``      task slots and visibility of the run directory, checked before and while it runs
``rto``          the recovery-time objective: start-up floor, per-task model, predictions
``session``      the SparkSession, configured for long-lived tasks and Arrow; the early start
``jvm_archive``  class-data sharing for the driver JVM
``task``         the long-lived operator task: upstream log to output log, recovery on restart
``counters``     :class:`TaskCounters`: what a task reports, declared once
``metrics``      the Prometheus textfile of a run
===============  ===============================================================================

First read: ``plan.py``, then ``task.py``. ``task`` and ``counters`` run on executors;
the rest runs in the driver.
"""
