"""The CLI shell: command tree, exit codes and error mapping."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cec.errors import (
    CecError,
    ClusterError,
    CorruptionError,
    RecoveryError,
    SpecError,
    UsageError,
)
from cli.app import main


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("run", "recover", "inspect", "export"):
        assert command in out


def test_console_script_is_installed() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.app", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "recover" in proc.stdout


def test_missing_required_option_is_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["recover"])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    ("error", "code"),
    [(CecError, 1), (UsageError, 2), (SpecError, 2), (CorruptionError, 3), (RecoveryError, 4),
     (ClusterError, 5)],
)
def test_error_tree_exit_codes(error: type[CecError], code: int) -> None:
    assert error("x").exit_code == code
    assert issubclass(error, CecError)


@pytest.mark.parametrize("command", [["--help"], ["run", "pipeline", "--help"],
                                     ["recover", "--help"], ["inspect", "log", "--help"],
                                     ["inspect", "extent", "--help"], ["export", "--help"]])
def test_help_documents_the_exit_codes(command: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(command)
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for code in ("0 ok", "2 bad usage", "3 a damaged log", "4 recovery impossible",
                 "5 the cluster lost"):
        assert code in out, (command, code, out)
