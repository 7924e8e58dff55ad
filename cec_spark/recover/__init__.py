"""``cec recover --from-log``: a run directory becomes a resumed run.

==============  ================================================================================
``resume``      :func:`recover_run`: check and repair, rescale, recover each partition, resume
``partitions``  each partition's logs reconciled (``--repair``: cut), its EC rebuilt or predicted
``rescale``     ``--partitions P'``: drain every old partition to a common cut, hand the windows on
==============  ================================================================================

First read: ``resume.py``. Rebuilding one partition's eventual checkpoint and replaying
is the ``recovery`` layer's (:mod:`recovery.partition`); this package decides what to do
with a whole run.
"""
