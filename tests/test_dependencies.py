"""The installed dependencies are at versions their peers support (issue 29 item 7).

PySpark 4.x requires pandas >= 2.2 and warns at import (``FutureWarning``) that it does
not support pandas >= 3; ``pyspark.pandas`` does not even import with pandas 3. So
setup.cfg pins ``pandas>=2.2,<3``, and the environment must have such a pandas.
"""

from __future__ import annotations

import configparser
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest
from pyspark.loose_version import LooseVersion
from pyspark.sql.pandas.utils import require_minimum_pandas_version

REPO = Path(__file__).resolve().parents[1]


def _requirement(name: str) -> str:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    for line in cfg["options"]["install_requires"].splitlines():
        if re.match(rf"^{re.escape(name)}\s*[<>=!~]", line.strip()):
            return line.strip()
    raise AssertionError(f"{name} is not in setup.cfg's install_requires")


def test_setup_cfg_pins_pandas_below_3() -> None:
    req = _requirement("pandas")
    upper = re.search(r"<\s*([\d.]+)", req)
    assert upper is not None, f"{req}: no upper bound"
    assert LooseVersion(upper.group(1)) <= LooseVersion("3"), req
    lower = re.search(r">=\s*([\d.]+)", req)
    assert lower is not None and LooseVersion(lower.group(1)) >= LooseVersion("2.2"), req


def test_installed_pandas_is_one_pyspark_supports() -> None:
    assert LooseVersion("2.2") <= LooseVersion(pd.__version__) < LooseVersion("3"), (
        f"pandas {pd.__version__}: run `make install` (setup.cfg pins pandas>=2.2,<3)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PySpark's FutureWarning for pandas >= 3 fails
        require_minimum_pandas_version()


@pytest.mark.parametrize("module", ["pyspark.sql.pandas.conversion", "pyspark.pandas"])
def test_pyspark_pandas_modules_import_without_warning(module: str) -> None:
    import importlib

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        importlib.import_module(module)
