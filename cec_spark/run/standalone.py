"""A standalone master's view of the application: what it granted, what its Workers
have free, and the most it will ever grant (``spark://`` masters only).

:class:`StandaloneMaster` asks the master once over Spark's RPC (the port of its web UI,
the cores the application asked for) and then reads its ``/json/`` page at each look;
:func:`master_view` turns that page into slots (pure). Every question has a deadline of
:data:`MASTER_TIMEOUT_S`; any failure only means "not known", and the wait for slots
(:mod:`cec_spark.run.cluster`) falls back on the settings.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark import SparkContext

from cec_spark.run.slots import SlotView, conf_int

T = TypeVar("T")

MASTER_TIMEOUT_S = 10.0  # one question to a standalone master (RPC or its JSON page)


def master_view(apps: list[dict[str, Any]], workers: list[dict[str, Any]], app_id: str,
                requested_cores: int | None, cpus: int) -> tuple[int | None, int | None,
                                                                 int | None, str]:
    """From a standalone master's JSON (``/json/``): the slots granted to ``app_id``, those
    free on its alive Workers, and the ceiling from the cores the application asked for
    (``requested_cores``: spark.cores.max or the master's spark.deploy.defaultCores)."""
    granted = None
    for app in apps:
        if app.get("id") == app_id and isinstance(app.get("cores"), int):
            granted = int(app["cores"]) // cpus
    free = sum(int(w.get("coresfree", 0) or 0) for w in workers
               if w.get("state") == "ALIVE") // cpus
    if requested_cores is None or requested_cores >= 2**31 - 1:
        return granted, free, None, ""
    return (granted, free, requested_cores // cpus,
            f"the master grants it at most {requested_cores} cores (spark.cores.max, or "
            "the master's spark.deploy.defaultCores)")


class StandaloneMaster:
    """Asks a standalone master what it gave the application: the port of its web UI and
    the cores the application asked for once (over Spark's RPC, ``BoundPortsRequest`` and
    ``RequestMasterState``), then its ``/json/`` page at each look. Every question has a
    deadline; any failure only means "not known" (the wait falls back on the settings)."""

    def __init__(self, sc: SparkContext, master: str) -> None:
        self.sc = sc
        self.cpus = max(conf_int(dict(sc.getConf().getAll()), "spark.task.cpus") or 1, 1)
        self.host = ""
        self.ui_port: int | None = None
        self.requested: int | None = None
        hostport = master.strip()[len("spark://"):].split(",")[0]
        host, _, port = hostport.rpartition(":")
        if host and port.isdigit():
            self.host = host
            _with_deadline(lambda: self._ask(host, int(port)), MASTER_TIMEOUT_S)

    def _ask(self, host: str, port: int) -> None:
        jvm = self.sc._jvm
        assert jvm is not None
        cls = jvm.java.lang.Class.forName
        tag = jvm.scala.reflect.ClassTag.apply
        rpc = self.sc._jsc.sc().schedulerBackend().rpcEnv()
        ref = rpc.setupEndpointRef(jvm.org.apache.spark.rpc.RpcAddress(host, port), "Master")
        msgs = "org.apache.spark.deploy.master.MasterMessages$"
        ports = ref.askSync(cls(msgs + "BoundPortsRequest$").getField("MODULE$").get(None),
                            tag(cls(msgs + "BoundPortsResponse")))
        self.ui_port = int(ports.webUIPort())
        state = ref.askSync(
            cls("org.apache.spark.deploy.DeployMessages$RequestMasterState$")
            .getField("MODULE$").get(None),
            tag(cls("org.apache.spark.deploy.DeployMessages$MasterStateResponse")))
        app_id = self.sc.applicationId
        for app in state.activeApps():
            if app.id() == app_id:  # coresGranted is not sent (transient): coresLeft is all
                self.requested = int(app.coresGranted()) + int(app.coresLeft())

    def look(self, registered: int) -> SlotView:
        data = None
        if self.ui_port is not None:
            url = f"http://{self.host}:{self.ui_port}/json/"
            data = _with_deadline(lambda: _get_json(url), MASTER_TIMEOUT_S)
        if not isinstance(data, dict):
            ceiling = None if self.requested is None or self.requested >= 2**31 - 1 else (
                self.requested // self.cpus)
            return SlotView(registered, ceiling=ceiling,
                            ceiling_why=f"the master grants it at most {self.requested} cores")
        apps = [a for a in data.get("activeapps", []) if isinstance(a, dict)]
        workers = [w for w in data.get("workers", []) if isinstance(w, dict)]
        granted, free, ceiling, why = master_view(apps, workers, self.sc.applicationId or "",
                                                  self.requested, self.cpus)
        return SlotView(registered, granted, free, ceiling, why)


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=MASTER_TIMEOUT_S) as r:
        return json.loads(r.read().decode())


def _with_deadline(call: Callable[[], T], timeout: float) -> T | None:
    """``call()`` in a daemon thread; None if it failed or did not answer in time."""
    out: list[T] = []

    def run() -> None:
        with contextlib.suppress(Exception):
            out.append(call())

    t = threading.Thread(target=run, name="cec-master-question", daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else None
