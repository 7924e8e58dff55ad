"""The `cec` command line.

Each command parses its arguments and calls one function of the Python API
(:mod:`cec_spark.api`: the same path a Python program takes); errors from the
library (:class:`cec.errors.CecError`) become a one-line message on stderr and the
exit status the error class carries (2 usage/spec, 3 corrupt log or a refused write,
4 recovery impossible, 5 the cluster lost the task slots a run needs).

``cec --help`` lists the commands in the order a user meets them (:data:`COMMANDS`),
each with a one-line summary (its ``short_help``). Importing this module loads typer
and rich only: the library (Spark, pyarrow, numpy, pandas, the log) is imported by the
command that runs, so ``cec --help`` and a usage error answer at once
(tests/cli/test_app.py checks what an import loads).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core
from rich.console import Console
from rich.markup import escape

import cec_spark  # its front page only: the API is loaded on first use
from cli.leave import leave
from cli.render import Column, render

if TYPE_CHECKING:
    from cec.spec import PipelineSpec
    from cec_spark.report import Result
    from cec_spark.rundir.layout import RunLayout

#: The commands, in the order ``cec --help`` lists them: a run; its results (as they
#: come, then all at once); recovery (after a crash, and the standby that is there
#: before one); a look inside its logs; the shipped examples.
COMMANDS = ("run", "tail", "export", "recover", "standby", "inspect", "examples")

EXIT_CODES = (
    "Exit status: 0 ok; 2 bad usage, spec, input or Spark setting (names the file, line, "
    "field or host); 3 a damaged log or run.toml (names segment and byte; 'cec recover "
    "--from-log RUN_DIR --repair' repairs it) or a write the file system refused; 4 recovery "
    "impossible (names the partition and what is lost); 5 the cluster lost the task slots "
    "a run needs ('cec recover' resumes); 130 interrupted (Ctrl-C; 'cec recover' resumes).")


class _Commands(typer.core.TyperGroup):
    """cec's command group: its commands listed in the order of :data:`COMMANDS` (click
    would sort them by name, typer lists them as they were declared)."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = list(super().list_commands(ctx))
        return sorted(names, key=lambda n: COMMANDS.index(n) if n in COMMANDS else len(COMMANDS))


app = typer.Typer(
    name="cec",
    cls=_Commands,
    help="Continuous eventual checkpointing for windowed stream operators on Spark.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
run_app = typer.Typer(help="Run a pipeline.", no_args_is_help=True)
inspect_app = typer.Typer(
    help="Look inside logs: extents, segments, checksums.", no_args_is_help=True
)
examples_app = typer.Typer(
    help="The example pipelines shipped with cec: list them, or copy them to a directory.",
    invoke_without_command=True,
)
app.add_typer(run_app, name="run", short_help="Run a pipeline spec on Spark.")
app.add_typer(inspect_app, name="inspect",
              short_help="Look inside a run's logs: the extent, segments, checksums.")
app.add_typer(examples_app, name="examples",
              short_help="List the example pipeline specs, or copy them to a directory.")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import (  # noqa: PLC0415 - only for --version
            PackageNotFoundError,
            version,
        )

        try:
            v = version("cec")
        except PackageNotFoundError:  # run from a checkout that is not installed
            v = "unknown (not installed)"
        out_console.print(f"cec {v}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main_options(
    show_version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print cec's version and exit.")
    ] = False,
) -> None:
    """Continuous eventual checkpointing for windowed stream operators on Spark."""

err_console = Console(stderr=True)
out_console = Console()

FormatOpt = Annotated[str | None, typer.Option("--format", help="The --out file's format, csv or "
                     "parquet (default: as its name ends, .parquet/.pq or .csv; else csv).")]
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print machine-readable JSON (its fields: docs/JSON.md).")]
ConfOpt = Annotated[list[str] | None, typer.Option("--conf", metavar="KEY=VALUE",
    help="A Spark setting (repeatable), over the spec's \\[run.spark] and cec's defaults.")]
# What every command but `run` reads: the run directory (run.toml, the logs, the state),
# named as the code names it; `recover` and `standby` take it as --from-log.
RunDirArg = Annotated[Path, typer.Argument(metavar="RUN_DIR", help="The run directory.")]


# The table each command prints under its summary: (heading, path into a row); see
# cli/render.py for the paths.
RUN_COLUMNS: tuple[Column, ...] = (
    "partition", "in_tuples", "r", "g_open", "g_check", "n_open", "q", "u", "done")
RECOVER_COLUMNS: tuple[Column, ...] = (
    "partition", "n_c", "replay_after_seq", "t_c", ("extent_records", "extent.records"),
    ("extent_bytes", "extent.bytes"), ("replay_positions", "extent.replay_length"),
    ("replay_tuples", "replay.tuples"), ("reconcile_s", "phases.reconcile.seconds"),
    ("scan_s", "phases.scan.seconds"), ("load_s", "phases.load.seconds"),
    ("replay_s", "phases.replay.seconds"))
EXTENT_COLUMNS: tuple[Column, ...] = (
    "partition", "q", "u", "replay_after_seq", "n_c", "t_c", ("R", "counts.R"),
    ("G_open", "counts.G_open"), ("G_check", "counts.G_check"), ("oldest_age", "oldest.0.age"),
    ("recovery_s", "predicted_recovery_s"), ("late", "late_rows"), "watermark")
LOG_COLUMNS: tuple[Column, ...] = (
    "path", ("segments", "segments.#"), "first_seq", "last_seq", "sealed",
    ("records", "verify.records"), ("checksums_ok", "verify.ok"), "token")


def _show(result: Result, json_out: bool, rows: str | None = None,
          columns: tuple[Column, ...] = ()) -> None:
    render(result, json_out=json_out, rows=rows, columns=columns, console=out_console)


# Whether this process is the `cec` command itself (see main): only then may a command
# start Spark early; a caller that embeds the CLI may start sessions of its own.
_OWN_PROCESS = [False]


def _start_spark_early(spec: PipelineSpec | None) -> None:
    """Start the run's Spark driver and its daemon's imports now (the spec read once)."""
    if not _OWN_PROCESS[0] or spec is None:
        return
    from cec_spark.driver import zygote  # noqa: PLC0415 - Spark only when needed
    from cec_spark.run.rto import measure_startup  # noqa: PLC0415
    from cec_spark.run.session import start_early  # noqa: PLC0415
    measure_startup()  # this process is the command: its start-up is one
    zygote.spawn(spec.run.effective_master)  # the worker daemon's imports, begun now
    start_early(spec.run.effective_master, spec.run.partitions, spec.run.spark_conf)


def _stored_spec(run_dir: Path, master: str | None, conf: dict[str, str],
                 trust: bool) -> PipelineSpec | None:
    """The spec a resume runs, for the early start: None when it cannot be read (the
    command then reports why) or the run directory is not trusted (its Spark settings
    are code as much as its [filter])."""
    if not _OWN_PROCESS[0]:
        return None
    try:
        return cec_spark.api.stored_spec(run_dir, master=master, conf=conf, trust=trust)
    except Exception:
        return None


@run_app.command("pipeline", epilog=EXIT_CODES,
                 short_help="Run a pipeline spec on Spark until its source ends or Ctrl-C.")
def run_pipeline(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Pipeline spec (TOML).")],
    run_dir: Annotated[Path | None, typer.Option(
        "--log-dir", metavar="RUN_DIR", help="The run directory, new or empty (default: "
        "runs/NAME for a spec NAME.toml).")] = None,
    partitions: Annotated[int | None, typer.Option(
        "--partitions", min=1, help="Key partitions: the long-lived operator tasks, each "
        "with its own logs (over the spec's \\[run] partitions).")] = None,
    master: Annotated[str | None, typer.Option(
        "--master", help="Spark master URL (local[N], spark://HOST:PORT, yarn, k8s://...).")
    ] = None,
    conf: ConfOpt = None,
    max_tuples: Annotated[int | None, typer.Option(
        "--max-tuples", min=0, help="Read at most this many source rows.")] = None,
    rto: Annotated[str | None, typer.Option(
        "--rto", help="Recovery-time objective, e.g. 30s: Q and U are set from measured "
        "recovery rates (the spec must not set Q or U).")] = None,
    standby: Annotated[bool, typer.Option(
        "--standby", help="Also start a warm standby on this machine ('cec standby', in "
        "its own session; its messages in RUN/standby.log): if this process dies, it "
        "takes the run over in about a second.")] = False,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Once the run has ended, write its results to this file, as 'cec "
        "export RUN --out FILE' does (not when it is interrupted).")] = None,
    fmt: FormatOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a pipeline spec on Spark until its bounded source ends or Ctrl-C."""
    from cec.spec import parse_conf  # noqa: PLC0415 - the library when a command runs
    from cec_spark.read.export import export_format  # noqa: PLC0415
    from cec_spark.read.export_ahead import ReadAhead  # noqa: PLC0415

    fmt = export_format(out or "", fmt)  # before the run, not after it
    spec = cec_spark.api.load(spec_path, partitions=partitions, master=master,
                              conf=parse_conf(conf or []), rto=rto,
                              standby=standby)  # read once
    _start_spark_early(spec)
    with ReadAhead(out, fmt, _start_standby(master, conf or []) if standby else None) as ahead:
        outcome = cec_spark.api.run(spec, run_dir, spec_path=spec_path, max_tuples=max_tuples,
                                    progress=not json_out, keep_session=False,
                                    on_started=ahead.started, on_ended=ahead.ended).outcome
        if out is not None and not outcome.interrupted:  # in this process: no second start
            outcome = dataclasses.replace(outcome, export=ahead.result(outcome.run_dir))
    _show(outcome, json_out, "per_partition", RUN_COLUMNS)
    if outcome.interrupted:
        if out is not None:  # `cec recover` resumes it
            err_console.print(f"cec: --out {escape(str(out))}: not written, the run was "
                              "interrupted", highlight=False, soft_wrap=True)
        raise typer.Exit(130)


def _start_standby(master: str | None, conf: list[str]) -> Callable[[RunLayout], None]:
    """``--standby``: once the run's ``run.toml`` and lease exist, ``cec standby --from-log
    RUN`` in a session of its own (not this driver's daemon zygote), to ``RUN/standby.log``."""
    def start(layout: RunLayout) -> None:
        from cec_spark.driver.zygote import ENV  # noqa: PLC0415 - when it runs
        from cec_spark.rundir.drivers import latest_driver  # noqa: PLC0415
        args = [sys.executable, "-m", "cli.app", "standby", "--from-log", str(layout.root),
                "--for-driver", str(latest_driver(layout))]
        if master is not None:
            args += ["--master", master]
        for item in conf:
            args += ["--conf", item]
        log = layout.standby_log
        env = {k: v for k, v in os.environ.items() if k != ENV}
        with open(log, "ab") as out:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, env=env,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        err_console.print(f"cec: standby started (pid {proc.pid}); its messages: {log}",
                          highlight=False, soft_wrap=True)

    return start


@app.command("standby", epilog=EXIT_CODES,
             short_help="Watch a run's driver; take the run over when it dies.")
def standby(
    run_dir: Annotated[Path, typer.Option(
        "--from-log", metavar="RUN_DIR",
        help="The run directory (it may not exist yet: the standby waits).")],
    master: Annotated[str | None, typer.Option(
        "--master", help="The Spark master the standby warms and takes over on "
        "(default: the run's own).")] = None,
    conf: ConfOpt = None,
    partitions: Annotated[int | None, typer.Option(
        "--partitions", min=1, help="With no run yet: warm for this many partitions "
        "(with --master, or alone for the default local master) before the run exists; "
        "checked against the run when it appears.")] = None,
    lease: Annotated[float, typer.Option(
        "--lease", min=1.0, help="Seconds a driver's lease may stand still before the "
        "standby calls it dead or frozen (a death on this host is seen at once).")] = 2.0,
    trust: Annotated[bool, typer.Option(
        "--trust", help="Stand by for a run directory another user owns.")] = False,
    for_driver: Annotated[int | None, typer.Option(
        "--for-driver", hidden=True, help="Started by this driver (cec run --standby).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Warm up, watch the run's driver, and take the run over when it dies: recovery
    without a restart. Ends when the run ends (exit 0), or after a takeover with the
    result and exit status 'cec recover' would give."""
    from cec.spec import parse_conf  # noqa: PLC0415 - the library when a command runs

    end = cec_spark.api.standby(run_dir, master=master, conf=parse_conf(conf or []),
                                partitions=partitions, progress=not json_out, lease_s=lease,
                                trust=trust, for_driver=for_driver)
    if end.recovered is not None:
        _show(end.recovered, json_out, "partitions", RECOVER_COLUMNS)
        if end.recovered.resumed is not None and end.recovered.resumed.interrupted:
            raise typer.Exit(130)
    elif end.code:
        raise typer.Exit(end.code)


@app.command("recover", epilog=EXIT_CODES,
             short_help="Rebuild every partition's eventual checkpoint and resume the run.")
def recover(
    run_dir: Annotated[Path, typer.Option(
        "--from-log", metavar="RUN_DIR", help="The run directory.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Explain, do not resume.")] = False,
    master: Annotated[str | None, typer.Option(
        "--master", help="Resume on this Spark master (default: the run's own).")] = None,
    conf: ConfOpt = None,
    repair: Annotated[bool, typer.Option(
        "--repair", help="Restore a damaged run.toml from its backup; cut a damaged "
        "upstream log at its first bad frame and read the rows cut again from the "
        "source (exit 4 naming them if the source is gone); an upstream log that caches "
        "a file source ([run] upstream) is cut without it.")] = False,
    trust: Annotated[bool, typer.Option(
        "--trust", help="Resume a run directory another user owns (its \\[filter] is Spark "
        "SQL that the resume executes).")] = False,
    partitions: Annotated[int | None, typer.Option(
        "--partitions", min=1, help="Rescale: resume with this many partitions (open "
        "windows move by key group at a common input cut; a run started before key "
        "groups cannot). With --dry-run: say what would move.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Rebuild every partition's eventual checkpoint and resume the pipeline."""
    from cec.spec import parse_conf  # noqa: PLC0415 - the library when a command runs
    from cec_spark.rundir.run_file import rescaled_spec  # noqa: PLC0415 - likewise

    if not dry_run:
        spec = _stored_spec(run_dir, master, parse_conf(conf or []), trust)
        if spec is not None and partitions is not None:
            spec = rescaled_spec(spec, partitions).with_run(master=master)
        _start_spark_early(spec)
    result = cec_spark.api.recover(run_dir, dry_run=dry_run, progress=not json_out,
                                   master=master, conf=parse_conf(conf or []), repair=repair,
                                   trust=trust, partitions=partitions)
    for line in result.repairs:
        err_console.print(f"cec: repaired: {escape(line)}", highlight=False, soft_wrap=True)
    if result.rescale is not None and not json_out:
        for line in result.rescale.lines():
            err_console.print(f"cec: {escape(line)}", highlight=False, soft_wrap=True)
    _show(result, json_out, "partitions", RECOVER_COLUMNS)
    if not json_out:
        for line in result.would:
            out_console.print(f"would: {escape(line)}", highlight=False, soft_wrap=True)
    if result.resumed is not None and result.resumed.interrupted:
        raise typer.Exit(130)


@inspect_app.command("extent", epilog=EXIT_CODES,
                     short_help="The extent of the eventual checkpoint, now or as of a time.")
def inspect_extent(
    run_dir: RunDirArg,
    partition: Annotated[int | None, typer.Option(
        "--partition", min=0, help="This partition only (default: every one).")] = None,
    at: Annotated[int | None, typer.Option("--at", help="As of this timestamp (us).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """The extent of the eventual checkpoint, now or as of a timestamp."""
    result = cec_spark.api.inspect_extent(run_dir, partition=partition, at=at)
    for e in result.partitions:
        if e.trimmed_through_seq is not None:
            err_console.print(f"cec: partition {e.partition}: {escape(e.reason)}",
                              highlight=False, soft_wrap=True)
    _show(result, json_out, "partitions", EXTENT_COLUMNS)


@inspect_app.command("log", epilog=EXIT_CODES,
                     short_help="Segments, records, index and checksums of a run's logs.")
def inspect_log(
    path: Annotated[Path, typer.Argument(
        metavar="RUN_DIR", help="The run directory (every log in it), or one log's "
        "directory.")],
    verify: Annotated[bool, typer.Option("--verify", help="Check every checksum.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Segments, records, index and checksums of a log."""
    result = cec_spark.api.inspect_log(path, verify=verify)
    _show(result, json_out, "logs", LOG_COLUMNS)
    if result.damaged:  # every damaged log is named, then exit 3
        for line in result.damaged:
            err_console.print(f"[bold red]cec:[/] {escape(line)}", highlight=False,
                              soft_wrap=True)
        raise typer.Exit(3)


@app.command("export", epilog=EXIT_CODES,
             short_help="Write every result of a run to one CSV or parquet file.")
def export(
    run_dir: RunDirArg,
    out: Annotated[Path, typer.Option("--out", help="Output file.")],
    fmt: FormatOpt = None,
    consumer: Annotated[str | None, typer.Option(
        "--consumer", help="Export only what this consumer has not acknowledged yet, then "
        "acknowledge it (output retention keeps what is not acknowledged).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Every result (R) of every partition, control records dropped."""
    _show(cec_spark.api.export(run_dir, out, fmt, consumer), json_out)


@app.command("tail", epilog=EXIT_CODES,
             short_help="Print each result of a run as soon as it is durable.")
def tail(
    run_dir: RunDirArg,
    fmt: Annotated[str, typer.Option("--format", help="jsonl or csv.")] = "jsonl",
    from_start: Annotated[bool, typer.Option(
        "--from-start", help="From the first result (default: only new ones).")] = False,
    consumer: Annotated[str | None, typer.Option(
        "--consumer", help="After what this consumer acknowledged; acknowledge as it "
        "prints (a restarted tail goes on where it stopped; exactly once into a file "
        "opened with >>).")] = None,
) -> None:
    """Print each result as soon as it is durable, one line per result (the fields of
    cec export), until a bounded run completes or Ctrl-C (exit 130)."""
    try:
        cec_spark.api.tail(run_dir, fmt=fmt, from_start=from_start, consumer=consumer)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except BrokenPipeError:  # `cec tail ... | head`: the reader is gone, as for any filter
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


@examples_app.callback()
def examples_list(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the example pipeline specs (``cec examples copy DIR`` copies them)."""
    if ctx.invoked_subcommand is not None:
        return
    from cli.example_specs import list_examples  # noqa: PLC0415 - when the command runs

    found = list_examples()
    if json_out:
        sys.stdout.write(json.dumps([{"name": e.name, "summary": e.summary} for e in found],
                                    indent=2) + "\n")
        return
    for e in found:
        out_console.print(f"{e.name}  {escape(e.summary)}", highlight=False, soft_wrap=True)


@examples_app.command("copy", short_help="Copy every example into a directory.")
def examples_copy(
    target: Annotated[Path, typer.Argument(help="Directory to copy them into (created).")],
    json_out: JsonOpt = False,
) -> None:
    """Copy every example (specs, their data, the README of every field) into TARGET."""
    from cli.example_specs import copy_examples  # noqa: PLC0415 - when the command runs

    written = copy_examples(target)
    if json_out:
        sys.stdout.write(json.dumps({"copied": [str(p) for p in written]}, indent=2) + "\n")
        return
    for path in written:
        out_console.print(escape(str(path)), highlight=False, soft_wrap=True)


def _set_umask() -> None:
    """Files and directories cec creates are private (0600/0700) unless ``CEC_UMASK``
    (octal, e.g. ``022``) says otherwise: the logs hold the user's data."""
    raw = os.environ.get("CEC_UMASK", "077")
    try:
        os.umask(int(raw, 8))
    except ValueError:
        err_console.print(f"cec: CEC_UMASK={raw!r} is not an octal umask; using 077",
                          highlight=False)
        os.umask(0o077)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; maps a user error (cec's or the log's,
    :class:`cec.errors.CecError`) to a one-line message and its exit code.

    Usage errors found by the argument parser exit with status 2 (click's own rule).
    Without ``argv`` this process is the `cec` command (the console script,
    ``python -m cli.app``): its run and recover commands start the Spark driver early.
    """
    _OWN_PROCESS[0] = argv is None
    _set_umask()
    try:
        app(args=argv, prog_name="cec")
    except SystemExit as exc:  # click ends every command so; the `cec` process ends here
        if argv is None and (exc.code is None or isinstance(exc.code, int)):
            leave(exc.code or 0)
        raise
    except Exception as exc:
        # the error tree is imported here, when a command failed: it is the log's
        # (storage_log.errors), whose package loads pyarrow
        from cec.errors import CecError  # noqa: PLC0415
        from cec_spark.report import ErrorReport  # noqa: PLC0415

        if not isinstance(exc, CecError):
            raise
        if "--json" in (sys.argv[1:] if argv is None else argv):  # a program reads stderr
            report = ErrorReport(error=str(exc), exit_code=exc.exit_code,
                                 kind=type(exc).__name__)
            sys.stderr.write(json.dumps(dataclasses.asdict(report)) + "\n")
        else:
            err_console.print(f"[bold red]cec:[/] {escape(str(exc))}", highlight=False,
                              soft_wrap=True)
        return leave(exc.exit_code) if argv is None else exc.exit_code
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
