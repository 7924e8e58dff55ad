"""The `cec` command line.

Each command parses its arguments and calls one library function; errors from the
library (:class:`cec.errors.CecError`) become a one-line message on stderr and the
exit status the error class carries (2 usage/spec, 3 corrupt log, 4 recovery
impossible).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from cec.errors import CecError, NotImplementedYetError

app = typer.Typer(
    name="cec",
    help="Continuous eventual checkpointing for windowed stream operators on Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
run_app = typer.Typer(help="Run a pipeline.", no_args_is_help=True)
inspect_app = typer.Typer(
    help="Look inside logs: extents, segments, checksums.", no_args_is_help=True
)
app.add_typer(run_app, name="run")
app.add_typer(inspect_app, name="inspect")

err_console = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _not_yet(command: str) -> None:
    raise NotImplementedYetError(f"'cec {command}' is not implemented yet")


@run_app.command("pipeline")
def run_pipeline(
    spec: Annotated[Path, typer.Argument(help="Pipeline spec (TOML).")],
    log_dir: Annotated[Path | None, typer.Option("--log-dir", help="Where logs go.")] = None,
    partitions: Annotated[int | None, typer.Option("--partitions", min=1)] = None,
    master: Annotated[str | None, typer.Option("--master", help="Spark master URL.")] = None,
    max_tuples: Annotated[int | None, typer.Option("--max-tuples", min=0)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a pipeline spec on Spark until its bounded source ends or Ctrl-C."""
    _not_yet("run pipeline")


@app.command("recover")
def recover(
    from_log: Annotated[Path, typer.Option("--from-log", help="The run's log directory.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Explain, do not resume.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Rebuild every partition's eventual checkpoint and resume the pipeline."""
    _not_yet("recover")


@inspect_app.command("extent")
def inspect_extent(
    log_dir: Annotated[Path, typer.Argument(help="The run's log directory.")],
    partition: Annotated[int | None, typer.Option("--partition", min=0)] = None,
    at: Annotated[int | None, typer.Option("--at", help="As of this timestamp (us).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """The extent of the eventual checkpoint, now or as of a timestamp."""
    _not_yet("inspect extent")


@inspect_app.command("log")
def inspect_log(
    log_dir: Annotated[Path, typer.Argument(help="A log directory.")],
    verify: Annotated[bool, typer.Option("--verify", help="Check every checksum.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Segments, records, index and checksums of a log."""
    _not_yet("inspect log")


@app.command("export")
def export(
    log_dir: Annotated[Path, typer.Argument(help="The run's log directory.")],
    out: Annotated[Path, typer.Option("--out", help="Output file.")],
    fmt: Annotated[str, typer.Option("--format", help="csv or parquet.")] = "csv",
    json_out: JsonOpt = False,
) -> None:
    """Every result (R) of every partition, control records dropped."""
    _not_yet("export")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; maps CecError to its exit code.

    Usage errors found by the argument parser exit with status 2 (click's own rule).
    """
    try:
        app(args=argv, prog_name="cec")
    except CecError as exc:
        err_console.print(f"[bold red]cec:[/] {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
