"""The CLI shell: command tree, exit codes and error mapping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cli.app
from cec.errors import (
    CecError,
    ClusterError,
    CorruptionError,
    RecoveryError,
    SpecError,
    UsageError,
    exit_code,
)
from cli.app import main
from storage_log.errors import (
    CorruptLogError,
    LogClosedError,
    LogFencedError,
    LogLockedError,
    LogNotFoundError,
    LogOrderError,
    LogSchemaError,
    LogSealedError,
    LogTrimmedError,
    LogUsageError,
    LogWriteError,
    StorageLogError,
)

# The log's errors derive from CecError (declared at the bottom, in storage_log.errors)
# and exit with the status they have always had.
STORAGE_CODES = [(StorageLogError, 1), (LogUsageError, 2), (CorruptLogError, 3),
                 (LogLockedError, 1), (LogFencedError, 1), (LogOrderError, 2),
                 (LogSchemaError, 2), (LogSealedError, 2), (LogNotFoundError, 2),
                 (LogTrimmedError, 1), (LogWriteError, 3), (LogClosedError, 2)]


# The order a user meets the commands in (issue 36): a run, its results live and at
# once, recovery after and before a crash, a look inside, the examples.
ORDER = ["run", "tail", "export", "recover", "standby", "inspect", "examples"]
HEAVY = ("pyspark", "pyarrow", "pandas", "numpy", "py4j")
# A fresh Python: import the CLI, note what is loaded, print `cec --help` (80 columns).
HELP_CHILD = f"""
import json, sys
import cli.app
loaded = [m for m in {HEAVY!r} if m in sys.modules]
try:
    cli.app.main(["--help"])
except SystemExit as exc:
    code = exc.code
after = [m for m in {HEAVY!r} if m in sys.modules]
sys.stderr.write(json.dumps({{"import": loaded, "help": after, "code": code}}))
"""


def _commands_panel(out: str) -> list[tuple[str, str]]:
    """(command, summary) of each row of the help's Commands panel, in order; a summary
    that wrapped onto a second line is a row of its own with an empty command."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "Commands" in line)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("╰"):
            break
        text = line.strip("│ ")
        name, _, summary = text.partition(" ")
        rows.append((name, summary.strip()) if not line[2:3].isspace() else ("", text))
    return rows


def test_help_lists_the_commands_in_order_with_one_line_summaries() -> None:
    """`cec --help` in a fresh process: the commands in ORDER, each summary one sentence
    on one line at 80 columns; importing the CLI and printing its help load no Spark,
    pyarrow, pandas or numpy (the library is imported by the command that runs)."""
    proc = subprocess.run([sys.executable, "-c", HELP_CHILD], capture_output=True,
                          text=True, check=False, env={**os.environ, "COLUMNS": "80"})
    child = json.loads(proc.stderr.strip().splitlines()[-1])
    assert child == {"import": [], "help": [], "code": 0}, proc.stderr
    rows = _commands_panel(proc.stdout)
    assert [name for name, _ in rows] == ORDER, proc.stdout
    for name, summary in rows:
        assert summary.endswith(".") and len(summary) > 20, (name, summary)


# A fresh Python: `cec run pipeline SPEC --out FILE` up to its early start of Spark (the
# JVM's launch, the worker zygote), which the child stops; what is loaded by then.
START_CHILD = """
import json, sys
import cli.app
def stop(spec):
    sys.stderr.write(json.dumps({"pandas": "pandas" in sys.modules}))
    raise SystemExit(0)
cli.app._start_spark_early = stop
cli.app.main(["run", "pipeline", sys.argv[1], "--out", sys.argv[2]])
"""


def test_run_starts_spark_before_importing_pandas(tmp_path: Path) -> None:
    """Nothing `cec run pipeline --out` does before it launches the JVM imports pandas
    (0.25 s, and with what it pulls in, the JVM launched 0.4-0.7 s later): `--out`'s
    format check imports the export module, whose record types were once made by
    ``pa.array`` of a list, which imports pandas to ask whether it is a DataFrame."""
    spec = tmp_path / "spec.toml"
    spec.write_text('[source]\nkind = "generator"\n\n[aggregate]\ngroup_by = "item_id"\n'
                    'field = "item_price"\nfunction = "avg"\n'
                    'window = { kind = "time", size = "10s" }\n')
    proc = subprocess.run([sys.executable, "-c", START_CHILD, str(spec),
                           str(tmp_path / "out.parquet")], capture_output=True, text=True,
                          check=False, cwd=Path(cli.app.__file__).parents[1])
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    assert loaded == {"pandas": False}, proc.stderr


def test_every_command_is_placed_in_the_order() -> None:
    import typer.main

    group = typer.main.get_command(cli.app.app)
    assert isinstance(group, cli.app._Commands)
    assert set(group.commands) == set(ORDER) == set(cli.app.COMMANDS)
    assert group.list_commands(typer.Context(group)) == ORDER


def test_help_names_the_run_directory(capsys: pytest.CaptureFixture[str]) -> None:
    """The flags stay (`cec recover --from-log` is the documented interface); the help
    calls what they take the run directory, as the code does."""
    for command in (["recover"], ["standby"], ["export"], ["tail"], ["inspect", "extent"],
                    ["inspect", "log"], ["run", "pipeline"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "The run directory" in out and "log directory" not in out, (command, out)
        assert "RUN_DIR" in out, (command, out)


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


@pytest.mark.parametrize(("error", "code"), STORAGE_CODES)
def test_storage_error_exit_codes(error: type[StorageLogError], code: int) -> None:
    assert error("x").exit_code == code == exit_code(error("x"))
    assert issubclass(error, StorageLogError) and issubclass(error, CecError)
    assert isinstance(error("x"), CecError)


def test_exit_code_of_an_unexpected_error_is_1() -> None:
    assert exit_code(RuntimeError("x")) == 1
    assert exit_code(SpecError("x")) == 2


@pytest.mark.parametrize(("error", "code"), [*STORAGE_CODES, (UsageError, 2),
                                             (RecoveryError, 4)])
def test_main_maps_an_error_to_one_line_and_its_exit_code(
        error: type[Exception], code: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise error(f"{tmp_path}/upstream-0: segment 00000000000000000000.seg at byte 64")

    monkeypatch.setattr(cli.app.cec_spark.api, "inspect_log", fail)
    assert main(["inspect", "log", str(tmp_path)]) == code
    err = capsys.readouterr().err
    assert err == f"cec: {tmp_path}/upstream-0: segment 00000000000000000000.seg at byte 64\n"


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


def test_a_failure_with_json_is_one_json_object_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 19 item 5: a program that asked for --json gets its error as JSON too."""
    from cec_spark.report import ErrorReport
    from cli.schema import problems

    code = main(["inspect", "log", str(tmp_path / "missing"), "--json"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    report = json.loads(captured.err)
    assert problems(report, ErrorReport) == []
    assert report["exit_code"] == 2 and str(tmp_path / "missing") in report["error"]
    assert main(["inspect", "log", str(tmp_path / "missing")]) == 2  # without: one line
    assert capsys.readouterr().err.startswith("cec: ")
