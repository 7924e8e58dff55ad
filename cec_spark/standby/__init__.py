"""``cec standby``: a warm process that takes a run over when its driver dies, so a
recovery costs what the eventual checkpoint costs, not a restart of Spark.

=================  ==============================================================
``standby.py``     the standby's life: the run, warm, watch, take over (first read)
``watch.py``       what it watches: the run until it exists, then the newest driver
                   until it dies (its lease's lock, its pid, its beat) or ends
``hot.py``         its operator tasks, already running: each follows its output
                   log's eventual checkpoint and is released at a takeover
=================  ==============================================================

The lease a driver and a standby hold is :mod:`cec_spark.rundir.lease`; the takeover
itself is ``cec recover`` (:mod:`cec_spark.recover.resume`) on the warm session, with
the driver number the standby claimed (:func:`cec_spark.rundir.drivers.claim_driver`).
"""
