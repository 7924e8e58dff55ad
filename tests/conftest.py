"""Session-wide test settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

#: The driver JVMs of the tests (every ``cec`` the tests start, every test SparkSession)
#: compile with the client compiler only. A test's JVM lives seconds to a minute on 2
#: shared cores, where the server compiler's threads competed with the run for the CPU:
#: measured (commit f15d5cb, load 16-26) a tiny ``cec run pipeline`` + ``cec recover``
#: took 184 s in three runs with it vs 434 s without. Spark's launcher adds
#: ``SPARK_SUBMIT_OPTS`` to the driver's command line (no "Picked up" line on stderr, as
#: ``JAVA_TOOL_OPTIONS`` would print); the library's own Java options are unchanged.
#: A value already set wins (``SPARK_SUBMIT_OPTS= make test`` runs with the full JIT).
TEST_DRIVER_JVM_OPTS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_DRIVER_JVM_OPTS)


#: ``make test-full`` (``CEC_TEST_FULL=1``): every test, every crash-point cell.
FULL = os.environ.get("CEC_TEST_FULL") == "1"

#: The long tests (each a real ``cec`` run, most of them killed, frozen, damaged,
#: rescaled and recovered, on local Spark or a standalone cluster: 10-110 s each on two
#: busy cores, 26 of the suite's 32 minutes of test time) in three parts; ``make test``
#: runs one part a day (the date's ordinal modulo 3), ``make test-full`` all of them.
#: Measured in fresh clones on this 2-core machine (2026-11-27): the whole suite 16 m
#: 18 s, past the 15-minute budget; one half of these tests a day 12 m 24 s and 14 m 55
#: s (the machine is shared: the same tests took up to 1.5 times as long in one run as
#: in another), still too close. Every module with three or more long tests has some
#: in every part; one with fewer runs its long tests every third day. The parts were
#: balanced by the measured times; a long test added later goes to the lightest part.
PARTS: dict[str, int] = {f"{path}::{test}": part for path, tests in {
    "tests/bench/test_pipeline_bench.py": {
        "test_session_runs_each_spec_in_order_into_its_own_run": 1,
    },
    "tests/cec_spark/test_api.py": {
        "test_a_dataframe_run_killed_is_recovered_exactly_by_the_cli": 2,
        "test_api_and_cli_give_identical_exports": 0,
    },
    "tests/cec_spark/test_bridge.py": {
        "test_a_stream_through_the_bridge_gives_exact_results": 0,
    },
    "tests/cec_spark/test_datasource.py": {
        "test_format_cec_needs_no_register_call": 1,
        "test_read_equals_cec_export": 0,
    },
    "tests/cec_spark/test_ingest_watermark_spark.py": {
        "test_kill9_while_idle_then_recover_is_exact": 2,
        "test_quiet_and_idle_logs_get_watermarks_and_the_export_is_exact[long-lived]": 0,
        "test_quiet_and_idle_logs_get_watermarks_and_the_export_is_exact[per-poll]": 1,
        "test_quiet_and_idle_logs_get_watermarks_and_the_export_is_exact[two-long-lived]": 2,
    },
    "tests/cec_spark/test_ingest_row_resume_kill.py": {
        "test_a_run_killed_after_a_commit_within_a_chunk_resumes_at_its_row[csv]": 2,
        "test_a_run_killed_after_a_commit_within_a_chunk_resumes_at_its_row[stream-dir]": 1,
    },
    "tests/cec_spark/test_key_groups.py": {
        "test_p32_killed_then_rescaled_to_48": 0,
    },
    "tests/cec_spark/test_old_runs.py": {
        "test_a_format_1_run_is_recovered_rescaled_and_exported_exactly[recover]": 0,
        "test_a_format_1_run_is_recovered_rescaled_and_exported_exactly[rescale-3-to-2]": 2,
    },
    "tests/cec_spark/test_recover_in_tasks.py": {
        "test_the_driver_of_recover_loads_no_window_state[recover]": 1,
        "test_the_driver_of_recover_loads_no_window_state[rescale-3-to-2]": 2,
    },
    "tests/cec_spark/test_rescale.py": {
        "test_a_killed_rescale_runs_again_and_rescales_twice": 0,
        "test_a_run_killed_before_its_logs_starts_with_other_partitions": 2,
        "test_a_stream_continues_after_the_cut": 1,
        "test_kill9_then_recover_with_other_partitions[count_sliding-2-8-0.5]": 2,
        "test_kill9_then_recover_with_other_partitions[time_sliding-3-1-0.25]": 0,
    },
    "tests/cec_spark/test_rto.py": {
        "test_a_run_with_rto_predicts_its_recovery_in_inspect_extent": 0,
    },
    "tests/cec_spark/test_run_spark.py": {
        "test_parallel_ingest_writes_the_same_logs[csv]": 0,
    },
    "tests/cec_spark/test_small_files_spark.py": {
        "test_damage_the_recovery_did_not_need_is_named_then_repaired": 1,
        "test_damaged_epoch_files_are_rebuilt_by_the_repair": 0,
        "test_the_other_small_files_damaged_then_repaired": 2,
    },
    "tests/cec_spark/test_stream_ingest.py": {
        "test_filtered_stream_uses_the_long_lived_ingest_and_exports_exactly": 2,
        "test_kill9_mid_stream_then_recover_is_exact[1]": 1,
        "test_kill9_mid_stream_then_recover_is_exact[2]": 0,
        "test_kill9_mid_stream_then_recover_is_exact[4]": 2,
        "test_one_of_two_ingest_tasks_killed_is_retried_alone_and_exact": 1,
    },
    "tests/cec_spark/test_tail_spark.py": {
        "test_tails_across_kills_of_the_run_and_of_themselves_print_every_result_once": 2,
    },
    "tests/cec_spark/test_time_types.py": {
        "test_late_rows_are_dropped_exactly_also_after_kill9": 1,
    },
    "tests/cec_spark/test_where.py": {
        "test_spark_and_evaluate_keep_the_same_rows": 2,
    },
    "tests/cli/test_no_hang.py": {
        "test_fifteen_runs_in_one_process": 0,
        "test_kill9_at_any_moment_then_recover": 1,
        "test_separate_processes_two_at_a_time": 2,
    },
    "tests/cli/test_pipeline_cli.py": {
        "test_a_completed_run_recovers_and_exports_without_its_source": 1,
        "test_a_second_driver_takes_over_and_the_first_stops": 0,
        "test_ctrl_c_stops_an_unbounded_run_cleanly_and_it_resumes": 1,
        "test_damaged_upstream_is_cut_and_read_again_from_the_source": 0,
        "test_disk_full_is_one_error_exit_3_then_recovers_exactly": 0,
        "test_kill9_of_the_whole_run_then_recover": 2,
        "test_output_retention_keeps_what_a_consumer_and_recovery_need": 2,
        "test_parallel_ingest_killed_then_recovered": 1,
        "test_run_toml_damaged_edited_or_lost_then_repaired": 2,
        "test_sigkill_of_one_operator_worker_is_retried": 2,
        "test_time_windows_past_int64_exit_2_naming_the_tuple": 1,
        "test_torn_and_corrupted_output_tails_are_healed": 1,
        "test_two_runs_racing_for_one_empty_directory": 0,
    },
    "tests/cli/test_sessions_cli.py": {
        "test_a_bridging_row_after_a_kill_merges_sessions_across_a_rescale": 0,
        "test_kill9_at_a_random_moment_and_a_torn_output_log_then_recover": 1,
        "test_late_bridging_rows_merge_sessions_as_pandas_and_spark_do": 2,
    },
    "tests/cli/test_standby.py": {
        "test_a_driver_killed_as_its_run_appears_and_one_killed_during_a_rescale": 0,
        "test_a_frozen_driver_is_fenced_and_writes_nothing_when_woken": 2,
        "test_two_standbys_a_killed_driver_and_a_standby_killed_while_taking_over": 1,
    },
    "tests/cli/test_standby_promises.py": {
        "test_a_driver_frozen_alone_is_fenced_while_its_tasks_write_and_stops_when_woken": 1,
        "test_a_standby_started_after_the_driver_died_takes_over": 2,
    },
    "tests/cli/test_watermarks_cli.py": {
        "test_a_quiet_partitions_windows_reach_the_tail_while_it_is_quiet_p2": 0,
        "test_a_quiet_partitions_windows_reach_the_tail_while_it_is_quiet_p4": 0,
        "test_idle_close_closes_the_last_windows_and_a_kill_while_idle_recovers_exactly": 1,
        "test_kill9_while_quiet_after_a_watermark_commit_then_recover_is_exact": 2,
    },
    "tests/on_cluster/test_cluster_runs.py": {
        "test_failure_free_run_on_three_workers": 1,
        "test_frozen_executor_wakes_up_fenced": 2,
        "test_run_directory_or_source_the_workers_cannot_see": 0,
        "test_sigkill_of_a_worker_then_exact": 0,
        "test_slots_lost_mid_run_exit_5_then_recover_exact": 1,
        "test_too_few_slots_exit_2_with_the_numbers": 1,
        "test_worker_lost_during_recovery": 2,
    },
    "tests/on_cluster/test_slow_executors.py": {
        "test_second_worker_15_s_late_is_waited_for": 2,
    },
    "tests/on_cluster/test_standby_host.py": {
        "test_a_standby_on_another_host_takes_over_by_the_lease_alone": 1,
    },
}.items() for test, part in tests.items()}


def todays_part(today: date | None = None) -> int:
    """The part of :data:`PARTS` that ``make test`` runs today (the date's ordinal
    modulo 3; ``CEC_TEST_PART=0|1|2`` chooses one)."""
    chosen = os.environ.get("CEC_TEST_PART")
    if chosen in ("0", "1", "2"):
        return int(chosen)
    return (today or date.today()).toordinal() % 3


def _rotate(items: list[pytest.Item]) -> None:
    """Skip the long tests of the other parts; refuse a name in :data:`PARTS` whose
    module, collected, has no such test function (a renamed test would otherwise run
    every day and its entry stay behind)."""
    modules = {item.nodeid.split("::")[0]: getattr(item, "module", None) for item in items}
    stale = [n for n in PARTS if n.split("::")[0] in modules
             and not hasattr(modules[n.split("::")[0]], n.split("::")[1].split("[")[0])]
    if stale:
        raise pytest.UsageError("tests/conftest.py PARTS names tests that do not exist: "
                                + ", ".join(stale))
    if FULL:
        return
    part = todays_part()
    skip = pytest.mark.skip(reason=f"a long test of another part (make test runs part "
                                   f"{part} of 3 today; CEC_TEST_FULL=1 or make test-full "
                                   "runs all)")
    for item in items:
        if PARTS.get(item.nodeid, part) != part:
            item.add_marker(skip)


def _module_rank(item: pytest.Item) -> int:
    if item.get_closest_marker("cluster") is not None:
        return 0
    return 1 if item.get_closest_marker("spark") is not None else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules in this order: those with a standalone cluster, then those with Spark,
    then the rest; each module's tests stay together and in their order.

    The suite runs on two workers, a file at a time each (setup.cfg: ``-n 2 --dist
    loadfile --no-loadscope-reorder``, so xdist keeps this order), and a worker takes
    the next file when it is done: the long files start first and the many short ones
    at the end fill both workers up to about the same moment. The cluster tests mostly
    wait (for Spark's timeouts, for a late Worker): the other worker runs Spark files
    beside them. The order is the same in every worker (xdist requires it), and
    without xdist too."""
    rank: dict[object, int] = {}
    for item in items:
        rank[item.path] = min(rank.get(item.path, 2), _module_rank(item))
    items.sort(key=lambda item: rank[item.path])  # stable: the collection's order else
    _rotate(items)


@pytest.fixture(scope="session", autouse=True)
def index_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every log index of the session in one temporary cache (``CEC_INDEX_DIR``), not
    in the user's ``~/.cache``; subprocesses (cec, Spark workers) inherit it."""
    root = tmp_path_factory.mktemp("index-cache")
    old = os.environ.get("CEC_INDEX_DIR")
    os.environ["CEC_INDEX_DIR"] = str(root)
    yield root
    if old is None:
        os.environ.pop("CEC_INDEX_DIR", None)
    else:
        os.environ["CEC_INDEX_DIR"] = old
