"""An operator task's result: its counters cross from the executor to the driver as JSON
and are parsed once into :class:`TaskCounters`, from which the run's report is built; no
Spark."""

from __future__ import annotations

import json

import pytest

from cec.errors import CecError
from cec_spark.report import PartitionRun
from cec_spark.run.counters import TaskCounters


def _ended() -> TaskCounters:
    return TaskCounters(3, pid=4242, attempt=1, in_batches=7, in_tuples=700, in_last_seq=699,
                        out_rows=90, r=50, g_open=30, g_check=10, n_open=4, q=12, u=80,
                        replay_after_seq=611, first_input_at=1700000000.25, process_s=0.5,
                        write_s=0.125, done=True, output_segments_trimmed=2,
                        rto={"predicted_s": 1.5}, started=1700000000.0,
                        updated=1700000001.5)


def test_counters_round_trip_through_their_json() -> None:
    counters = _ended()
    back = TaskCounters.from_json(counters.to_json())
    assert back == counters
    assert back.to_dict() == json.loads(counters.to_json())  # the state file's object


@pytest.mark.parametrize("text", ['{"in_tuples": 1}', '[3]', '{"p": 0, "bogus": 1}'])
def test_a_result_that_is_not_counters_is_refused(text: str) -> None:
    with pytest.raises(CecError, match="not its counters"):
        TaskCounters.from_json(text)


def test_partition_run_is_built_from_the_typed_counters() -> None:
    run = _ended().partition_run()
    assert isinstance(run, PartitionRun)
    assert (run.partition, run.pid, run.attempt, run.recovered) == (3, 4242, 1, None)
    assert (run.in_batches, run.in_tuples, run.in_last_seq, run.out_rows) == (7, 700, 699, 90)
    assert (run.r, run.g_open, run.g_check, run.n_open, run.q, run.u) == (50, 30, 10, 4, 12, 80)
    assert run.replay_after_seq == 611
    assert run.first_input_at_us == 1700000000250000
    assert (run.process_s, run.write_s) == (0.5, 0.125)
    assert (run.done, run.stopped, run.waiting) == (True, False, None)
    assert run.output_segments_trimmed == 2
    assert (run.started_at_us, run.updated_at_us) == (1700000000000000, 1700000001500000)
