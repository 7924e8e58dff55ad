"""The slot arithmetic and the mid-run slot watch (no Spark: a stand-in for the one
number they read, Spark's maxNumConcurrentTasks)."""

from __future__ import annotations

import pytest

from cec.errors import ClusterError, UsageError
from cec_spark.run import cluster
from cec_spark.run.cluster import SlotWatch, check_local_slots, local_slots, wait_for_slots


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


def test_wait_for_slots_returns_as_soon_as_there_are_enough(fake: FakeContext) -> None:
    fake.slots = [0, 0, 3, 6, 9]
    assert wait_for_slots(fake, 4, "spark://m:1", 30, clock=Clock(1.0)) == 6  # type: ignore[arg-type]


def test_wait_for_slots_gives_up_once_the_count_settled(fake: FakeContext) -> None:
    fake.slots = [0, 3, 3]
    clock = Clock(1.0)
    with pytest.raises(UsageError, match=r"needs 5 Spark task slots .* has 3"):
        wait_for_slots(fake, 4, "spark://m:1", 300, settle_s=5, clock=clock)  # type: ignore[arg-type]
    assert clock.t < 20  # not the whole executor_wait_s


def test_wait_for_slots_waits_the_whole_time_for_a_first_executor(fake: FakeContext
                                                                  ) -> None:
    clock = Clock(1.0)
    with pytest.raises(UsageError, match=r"has 0.*waited 3\d s"):
        wait_for_slots(fake, 4, "spark://m:1", 30, clock=clock)  # type: ignore[arg-type]


def test_wait_for_slots_of_a_stopped_application(fake: FakeContext) -> None:
    fake.stopped = True
    with pytest.raises(ClusterError, match="stopped before it got any executor"):
        wait_for_slots(fake, 4, "spark://m:1", 30, clock=Clock(1.0))  # type: ignore[arg-type]


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
