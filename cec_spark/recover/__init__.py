"""``cec recover --from-log``: a run directory becomes a resumed run.

==============  ================================================================================
``resume``      :func:`recover_run`: check and repair, rescale, reconcile the logs, resume
``partitions``  each partition's logs reconciled (``--repair``: cut), or its recovery predicted
``rescale``     ``--partitions P'``: drain every old partition to a common cut, hand the windows on
==============  ================================================================================

First read: ``resume.py``. Rebuilding one partition's eventual checkpoint and replaying
is the ``recovery`` layer's (:mod:`recovery.partition`), which each resumed operator
task runs for its own partition; this package decides what to do with a whole run, and
its driver never loads a window's state (a rescale's hand-over aside).
"""
