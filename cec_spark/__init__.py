"""cec's Spark runtime: a pipeline spec becomes an ingest, P long-lived operator tasks and
their logs; the library functions behind every command; the Python API.

The Python API, also at the top level (loaded on first use)::

    import cec_spark as cec
    res = (cec.stream(df, time="item_time").group_by("item_id")
              .window(time="10 seconds").agg(avg="item_price").run("runs/x"))
    res.results()    # a Spark DataFrame

(The core package ``cec`` cannot offer ``cec.stream``: it may not import Spark or
anything above it, ``tests/test_layers.py``; so ``import cec_spark as cec``.)

Packages, bottom to top; each imports only the ones above it in this table and the
two base modules (``tests/test_layers.py`` checks it):

* ``errors``, ``watchdog``: base modules: the runtime's errors; say what a command
  waits on.
* ``report/``: the typed result of every command (``--json``, ``docs/JSON.md``);
  first read ``run.py``.
* ``source/``: what a run reads: types, time fields, order and lateness, reading,
  checking, the stream folder, chunk planning, the fingerprint, the Kafka bridge;
  first read ``planner.py``.
* ``rundir/``: the run directory on disk: its map (every path under it), ``run.toml``,
  generations, the driver registry and leases, consumer acks, access checks, repair,
  output retention; first read ``layout.py``.
* ``run/``: what a run is made of: its plan, Spark session, cluster checks, the
  recovery-time objective, the long-lived operator task and its counters, metrics;
  first read ``plan.py``, then ``task.py``.
* ``ingest/``: source to upstream logs: the Spark query, the log writers, the logs'
  lifecycle, the ingest job, a stream folder's long-lived ingest; first read
  ``job.py``.
* ``driver/``: runs a plan: its jobs, the resubmit loop, progress, the worker daemon;
  first read ``runner.py``.
* ``recover/``: ``cec recover``: check and repair, rescale, recover each partition,
  resume; first read ``resume.py``.
* ``read/``: what reads a run: export, the Spark data source, inspect, ``cec tail``;
  first read ``export.py``.
* ``standby/``: ``cec standby``: a warm process that takes a run over when its driver
  dies (a ``recover`` on a session started in advance); first read ``standby.py``.
* ``api/``: the Python API, which the CLI calls (``cec run pipeline`` is its ``load``
  then ``run``: the plan, then the driver); first read ``builder.py``, then
  ``commands.py``.

Why this cut: the arrows follow a run's life. A run's *plan* is made before anything
runs and is what the ingest and the operator tasks take; the *driver* runs a plan;
*recover* makes a plan from a run directory and hands it to the driver; *read* needs
only the run directory; a *standby* waits to recover a run. Executors import
``source``, ``rundir``, ``run.task`` (with the counters and ``RtoTask`` it uses) and
``ingest``, never the driver's machinery, so the package ``__init__`` files import
nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cec_spark import api
    from cec_spark.api import Run, Stream, generator, load, recover, run, stream

_API = ("stream", "generator", "load", "run", "recover", "Stream", "Run")

__all__ = ["Run", "Stream", "api", "generator", "load", "recover", "run", "stream"]


def __getattr__(name: str) -> Any:
    api_module = importlib.import_module("cec_spark.api")
    if name == "api":
        return api_module
    if name in _API:
        return getattr(api_module, name)
    raise AttributeError(f"module 'cec_spark' has no attribute {name!r}")
