"""The run directory on disk (ARCHITECTURE §6): where every file of a run lives.

===============  ===============================================================================
``layout``       :class:`RunLayout`: the paths, generations, drivers, state files, acks
``run_file``     ``RUN/run.toml``: the resolved spec, the ``[cec]`` settings, a checksum
``generations``  ``RUN/generations.toml``: a rescaled run's generations, its copy
``retention``    output retention: which whole segments an operator task may delete
===============  ===============================================================================

First read: ``layout.py``. No Spark: the driver, the executors and every reader use it.
"""
