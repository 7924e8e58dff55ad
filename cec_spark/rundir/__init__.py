"""The run directory on disk (ARCHITECTURE §6): where every file of a run lives.

===============  ===============================================================================
``layout``       :class:`RunLayout`: the map of the run directory, every path under it
``run_file``     ``RUN/run.toml``: the resolved spec, the ``[cec]`` settings, a checksum; the
                 file written once, read, restored from its copy
``generations``  ``RUN/generations.toml``: a rescaled run's generations, its copy
``checksum``     the checksum line and format version of ``run.toml`` and ``generations.toml``
``drivers``      ``RUN/drivers/``: the driver numbers and leases; the live standbys
``lease``        a lease: a lock and a beat, how a driver or a standby says it is alive
``acks``         ``RUN/consumers/``: what each named consumer acknowledged
``advisory``     the advisory JSON files (``RUN/state/``): written whole, read as ``{}`` when
                 missing
``access``       who may use a run directory: a host that sees it, a user who owns it
``repair``       ``cec recover --repair`` on the small files; damage a recovery did not read
``retention``    output retention: which whole segments an operator task may delete
===============  ===============================================================================

First read: ``layout.py`` (its docstring is the map). The imports point one way: the
layout imports only ``generations`` (which imports only ``checksum``); a module here that
needs paths takes a :class:`RunLayout` and imports it. No Spark: the driver, the
executors and every reader use it.
"""
