"""The progress view's compact numbers (``cec_spark.driver.display.compact``): one unit
per magnitude, the value rounded before the unit is chosen (it printed "1e+03k" once)."""

from __future__ import annotations

import pytest

from cec_spark.driver.display import compact

TABLE = [
    (0, "0"), (0.0, "0"), (7, "7"), (999, "999"), (1000, "1k"), (1001, "1k"),
    (1049, "1.05k"), (12_345, "12.3k"), (999_499, "999k"), (999_500, "1M"),
    (999_999, "1M"), (1e6, "1M"), (4_560_000, "4.56M"), (999_950_000, "1G"),
    (1.5e9, "1.5G"), (2e12, "2T"), (3e15, "3P"), (1e18, "1E"), (1.5e21, "1,500E"),
    (-1, "-1"), (-1500, "-1.5k"), (-999_999, "-1M"), (-0.001, "0"),
    (0.25, "0.25"), (0.004, "0"), (1.005e-3, "0"), (12.345, "12.3"), (99.96, "100"),
    (999.4, "999"), (999.6, "1k"), (123.456, "123"),
    (float("inf"), "inf"), (float("nan"), "nan"),
]


@pytest.mark.parametrize(("value", "text"), TABLE)
def test_compact(value: float, text: str) -> None:
    assert compact(value) == text


@pytest.mark.parametrize("exponent", range(22))
def test_never_an_exponent_and_three_figures(exponent: int) -> None:
    """Every magnitude, on both sides of each unit's boundary: no ``e+`` and at most
    3 significant digits plus a decimal point before the unit (up to E)."""
    for value in (10**exponent - 1, 10**exponent, 10**exponent * 0.9995, -(10**exponent)):
        text = compact(value)
        assert "e+" not in text and "e-" not in text, (value, text)
        digits = text.lstrip("-").rstrip("kMGTPE")
        if abs(value) < 999.5e18:
            assert len(digits.replace(".", "")) <= 3, (value, text)
