"""The slot arithmetic, the wait for executors and the mid-run slot watch (no Spark: a
stand-in for what they read, Spark's maxNumConcurrentTasks, the settings and what a
standalone master says)."""

from __future__ import annotations

import pytest

from cec.errors import ClusterError, UsageError
from cec_spark.run import cluster
from cec_spark.run.cluster import SlotWatch, wait_for_slots
from cec_spark.run.slots import (
    SlotView,
    SlotWait,
    check_local_slots,
    conf_ceiling,
    decide_slots,
    local_slots,
    slot_wait,
)
from cec_spark.run.standalone import master_view


@pytest.mark.parametrize(("master", "slots"), [
    ("local", 1), ("local[3]", 3), ("local[6,3]", 6), ("local[ 4 , 2 ]", None),
    ("local[4, 2]", 4), ("spark://127.0.0.1:7077", None), ("yarn", None),
    ("k8s://https://h:6443", None), ("localhost", None),
])
def test_local_slots(master: str, slots: int | None) -> None:
    assert local_slots(master) == slots


def test_local_star_is_the_cpu_count() -> None:
    assert (local_slots("local[*]") or 0) >= 1


def test_check_local_slots_names_the_numbers() -> None:
    check_local_slots(4, "local[5]")  # 4 operators + 1 ingest: enough
    check_local_slots(4, "spark://127.0.0.1:7077")  # a cluster is asked later
    with pytest.raises(UsageError) as exc:
        check_local_slots(4, "local[2]")
    msg = str(exc.value)
    assert "needs 5 Spark task slots" in msg and "local[2] has 2" in msg
    assert "--partitions 1" in msg and "local[6,3]" in msg


class FakeContext:
    """What the slot functions read from a SparkContext: slots over time, stopped."""

    def __init__(self, slots: list[int]) -> None:
        self.slots = slots
        self.calls = 0
        self.stopped = False
        self.conf: dict[str, str] = {}

    def getConf(self) -> FakeContext:
        return self

    def getAll(self) -> list[tuple[str, str]]:
        return list(self.conf.items())


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeContext:
    ctx = FakeContext([0])

    def available(_sc: object) -> int:
        i = min(ctx.calls, len(ctx.slots) - 1)
        ctx.calls += 1
        return ctx.slots[i]

    monkeypatch.setattr(cluster, "available_slots", available)
    monkeypatch.setattr(cluster, "_stopped", lambda _sc: ctx.stopped)
    monkeypatch.setattr(cluster.time, "sleep", lambda _s: None)
    return ctx


class Clock:
    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def _nothing_known(registered: int) -> SlotView:
    return SlotView(registered)


def test_wait_for_slots_returns_as_soon_as_there_are_enough(fake: FakeContext) -> None:
    fake.slots = [0, 0, 3, 6, 9]
    assert wait_for_slots(fake, 4, "spark://m:1", 30, clock=Clock(1.0),  # type: ignore[arg-type]
                          look=_nothing_known) == 6


def test_wait_for_slots_does_not_give_up_when_the_count_stops_changing(
        fake: FakeContext, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 29: executors registered, then nothing for 20 s (a loaded machine, a slow
    container): the run waits on (it gave up after 5 s unchanged) and starts when the
    late ones come."""
    fake.slots = [3] * 20 + [6]
    assert wait_for_slots(fake, 4, "spark://m:1", 30, clock=Clock(1.0),  # type: ignore[arg-type]
                          look=_nothing_known) == 6
    err = capsys.readouterr().err
    assert "waiting up to 30 s for executors to register: 3 of 5 task slots so far" in err
    assert "6 task slots on spark://m:1; starting" in err


def test_wait_for_slots_fails_at_the_end_of_the_wait(fake: FakeContext) -> None:
    fake.slots = [0, 3, 3]
    clock = Clock(1.0)
    with pytest.raises(UsageError, match=r"needs 5 Spark task slots .* has 3.*"
                                         r"waited 30 s for executors to register"):
        wait_for_slots(fake, 4, "spark://m:1", 30, clock=clock,  # type: ignore[arg-type]
                       look=_nothing_known)
    assert 30 <= clock.t < 33


def test_wait_for_slots_waits_longer_for_executors_the_master_granted(
        fake: FakeContext, capsys: pytest.CaptureFixture[str]) -> None:
    """The master granted 6 slots at t=20 (a second Worker joined); their executor
    registers at t=50, after the 30 s wait: it is waited for."""
    fake.slots = [3] * 50 + [6]
    clock = Clock(1.0)

    def look(registered: int) -> SlotView:
        return SlotView(registered, granted=6 if clock.t >= 20 else 3, free=0)

    assert wait_for_slots(fake, 4, "spark://m:1", 30, clock=clock,  # type: ignore[arg-type]
                          look=look) == 6
    err = capsys.readouterr().err
    assert "for 3 task slots of executors the master granted to register" in err


def test_wait_for_slots_granted_that_never_register_fail_within_the_late_time(
        fake: FakeContext) -> None:
    fake.slots = [3]
    clock = Clock(1.0)
    with pytest.raises(UsageError, match=r"has 3.*waited 90 s .* the master granted 6 "
                                         r"and has 0 more free, of which 3 never registered"):
        wait_for_slots(fake, 4, "spark://m:1", 30, clock=clock,  # type: ignore[arg-type]
                       look=lambda r: SlotView(r, granted=6, free=0))
    assert clock.t < 100  # a minute or two, never a hang


def test_wait_for_slots_fails_at_once_when_it_can_never_get_them(fake: FakeContext) -> None:
    fake.slots = [0]
    clock = Clock(1.0)
    with pytest.raises(UsageError, match=r"needs 5 .* can never get more than 4 "
                                         r"\(spark.cores.max=4\)"):
        wait_for_slots(fake, 4, "spark://m:1", 30, clock=clock,  # type: ignore[arg-type]
                       look=lambda r: SlotView(r, ceiling=4, ceiling_why="spark.cores.max=4"))
    assert clock.t < 3


def test_wait_for_slots_waits_the_whole_time_for_a_first_executor(fake: FakeContext
                                                                  ) -> None:
    clock = Clock(1.0)
    with pytest.raises(UsageError, match=r"has 0.*waited 3\d s"):
        wait_for_slots(fake, 4, "spark://m:1", 30, clock=clock,  # type: ignore[arg-type]
                       look=_nothing_known)


def test_wait_for_slots_of_a_stopped_application(fake: FakeContext) -> None:
    fake.stopped = True
    with pytest.raises(ClusterError, match="stopped before it got any executor"):
        wait_for_slots(fake, 4, "spark://m:1", 30, clock=Clock(1.0),  # type: ignore[arg-type]
                       look=_nothing_known)


def test_wait_for_slots_on_a_local_master_does_not_wait(fake: FakeContext) -> None:
    fake.slots = [3]
    with pytest.raises(UsageError, match=r"needs 5 .* local\[3\] has 3"):
        wait_for_slots(fake, 4, "local[3]", 30, clock=Clock(1.0))  # type: ignore[arg-type]
    assert fake.calls == 1


def test_decide_slots_ratio_of_the_expected_slots() -> None:
    """Spark's minRegisteredResourcesRatio: with 10 slots expected and ratio 0.8 the run
    waits for 8 (while the wait lasts), then starts with the 5 it needs."""
    w = SlotWait(need=5, wait_s=30, target=8)
    assert decide_slots(w, SlotView(6), 10).action == "wait"
    assert "minRegisteredResourcesRatio" in decide_slots(w, SlotView(6), 10).why
    assert decide_slots(w, SlotView(8), 10).action == "start"
    assert decide_slots(w, SlotView(6), 30).action == "start"
    assert decide_slots(w, SlotView(4), 30).action == "fail"


def test_slot_wait_reads_sparks_settings() -> None:
    conf = {"spark.scheduler.maxRegisteredResourcesWaitingTime": "2min"}
    assert slot_wait(conf, 4, "spark://m:1", 30).wait_s == 120
    assert slot_wait({}, 4, "spark://m:1", 30) == SlotWait(need=5, wait_s=30, target=5)
    # YARN: 6 executors x 2 cores expected, ratio 0.8 by default: wait for 10 of 12
    yarn = {"spark.executor.instances": "6", "spark.executor.cores": "2"}
    assert slot_wait(yarn, 4, "yarn", 30).target == 10
    assert slot_wait({**yarn, "spark.scheduler.minRegisteredResourcesRatio": "0"}, 4,
                     "yarn", 30).target == 5
    # standalone: ratio 0 by default, as in Spark
    assert slot_wait({"spark.cores.max": "12"}, 4, "spark://m:1", 30).target == 5


def test_conf_ceiling() -> None:
    assert conf_ceiling({}, "spark://m:1") == (None, "")
    assert conf_ceiling({"spark.cores.max": "4", "spark.task.cpus": "2"},
                        "spark://m:1")[0] == 2
    assert conf_ceiling({}, "yarn") == (2, "spark.executor.instances=2 x 1 slots each")
    assert conf_ceiling({"spark.dynamicAllocation.enabled": "true"}, "k8s://h") == (None, "")
    assert conf_ceiling({"spark.dynamicAllocation.enabled": "true",
                         "spark.dynamicAllocation.maxExecutors": "3",
                         "spark.executor.cores": "4"}, "k8s://h")[0] == 12


def test_master_view_from_its_json() -> None:
    apps = [{"id": "app-1", "cores": 4}, {"id": "app-0", "cores": 9}]
    workers = [{"state": "ALIVE", "coresfree": 2}, {"state": "DEAD", "coresfree": 8},
               {"state": "ALIVE", "coresfree": 1}]
    assert master_view(apps, workers, "app-1", 2**31 - 1, 1) == (4, 3, None, "")
    granted, free, ceiling, why = master_view(apps, workers, "app-1", 6, 2)
    assert (granted, free, ceiling) == (2, 1, 3) and "at most 6 cores" in why
    assert master_view([], [], "app-1", None, 1) == (None, 0, None, "")


def test_slot_watch_waits_then_fails(fake: FakeContext, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    fake.slots = [9, 3, 3, 9, 3, 3, 3, 3, 3]
    clock = Clock(0.0)
    watch = SlotWatch(fake, 4, "spark://m:1", timeout_s=10, every_s=2,  # type: ignore[arg-type]
                      clock=clock)
    for t in (0, 2, 4):  # 9 slots, then 3: short since t=2
        clock.t = t
        watch.check()
    assert "only 3 of 5 task slots" in capsys.readouterr().err
    clock.t = 6
    watch.check()  # back to 9
    assert "task slots are back" in capsys.readouterr().err
    clock.t = 8
    watch.check()  # short again since t=8
    clock.t = 17
    watch.check()  # 9 s: not yet
    clock.t = 19
    with pytest.raises(ClusterError, match=r"only 3 of the 5 task slots .* for 1\d s"):
        watch.check()
