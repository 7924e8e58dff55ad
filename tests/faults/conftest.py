"""The crash-point matrix (tests/faults): a sample in every ``pytest`` run, every cell
with ``CEC_FAULTS_FULL=1`` (``make test-faults``).

Cells marked ``faults_full`` are skipped unless ``CEC_FAULTS_FULL=1``: each one is a
real ``cec`` run killed -9 and recovered (20-60 s), and the suite's budget holds two
of them a day, one task cell and one other (a host, the reconcile, the driver or an
idle cell), and one tail cell (test_crash_points.py's ``sample`` says which, by the
date)."""

from __future__ import annotations

import os

import pytest

FULL = os.environ.get("CEC_FAULTS_FULL") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults_full: a crash-point cell run only with CEC_FAULTS_FULL=1 "
                   "(make test-faults)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not FULL and item.get_closest_marker("faults_full") is not None:
        pytest.skip("a crash-point cell outside today's sample (CEC_FAULTS_FULL=1 or "
                    "make test-faults runs every cell)")
