"""The `gpumeter` command line: its parser, and the one place where an error becomes one line, never a
traceback on the console: exit 2 for a user's or a source's problem, 1 for a bug (an internal error). The
commands that run Dagster jobs log the runs' event stream, and any traceback, to a file that line names.
The commands are gpumeter.cli.commands (a deployment's) and gpumeter.cli.demo (the simulated factory); what
they print is gpumeter.cli.render."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path

from rich.markup import escape

from gpumeter.billing.invoices import InvoiceError, Period
from gpumeter.cli import commands, demo
from gpumeter.cli.commands import CliError
from gpumeter.cli.render import err
from gpumeter.config import DEMO_DIR


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def _period(text: str) -> str:
    try:
        return str(Period.parse(text))
    except InvoiceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time (ISO 8601, e.g. 2026-11-01T10:00:00Z)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # a time without a zone is UTC


def _days(text: str) -> int:
    try:
        days = int(text)
    except ValueError:
        days = 0
    if days <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of days")
    return days


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpumeter")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _minutes(text: str) -> int:
    try:
        minutes = int(text)
    except ValueError:
        minutes = 0
    if minutes <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of minutes")
    return minutes


def _config_and_clusters(parser: argparse.ArgumentParser, clusters: str) -> None:
    """--config, and --cluster (repeatable) with its help text."""
    parser.add_argument("--config", required=True, help="gpumeter YAML config")
    parser.add_argument("--cluster", action="append", metavar="NAME", help=clusters)


# The commands that run Dagster jobs: their runs' event stream goes to a log file, not the console.
DAGSTER_COMMANDS = frozenset({"demo", "run", "today", "invoices", "close"})
LOG_FOLDER = "gpumeter-logs"

EPILOG = (
    "The commands that run Dagster jobs (demo, run, today, invoices, close) write the runs' Dagster event "
    f"log to $DAGSTER_HOME/{LOG_FOLDER}/gpumeter-COMMAND-TIME-PID.log (without a writable DAGSTER_HOME: "
    f"{Path(tempfile.gettempdir()) / LOG_FOLDER}/), nothing of it to the console. A failure prints one line: "
    "its cause, what to do and that log, which holds the traceback. Exit status of a failure: 2 for a "
    "problem of the config, a source, the warehouse or a month (fix it and run again), 1 for an internal "
    "error (a bug: report it with the log)."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpumeter",
        description="GPU metering, chargeback and utilization analytics for shared Kubernetes GPU pools.",
        epilog=EPILOG,
    )
    parser.add_argument(
        "--version", action="version", version=f"gpumeter {_version()}", help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo_cmd = sub.add_parser(
        "demo",
        help="simulate a small AI factory, meter it with the Dagster job, invoice it; its pool changes during "
        "the second day (a MIG re-partition, a deleted and recreated pod, a short DRA job, a relabel, a "
        "re-published DRA slice, kube-state-metrics rolled out with a surge)",
    )
    demo_cmd.add_argument("--out", default=str(DEMO_DIR), help="working directory (default: %(default)s)")
    demo_cmd.add_argument(
        "--days",
        type=_days,
        help=f"days to simulate (default: 7; with --prometheus: {demo.DEMO_PROMETHEUS_DAYS}, because promtool takes "
        "about 15 s or more to backfill each simulated day)",
    )
    demo_cmd.add_argument(
        "--prometheus",
        action="store_true",
        help="meter through a real, local Prometheus: write OpenMetrics, backfill it with promtool into "
        "OUT/prometheus-tsdb, serve it on 127.0.0.1 and read it with a `kind: prometheus` source "
        "(needs the Debian package prometheus)",
    )
    demo_cmd.set_defaults(func=demo.cmd_demo)

    run = sub.add_parser(
        "run",
        help="meter days, one run per (cluster, day) (the Dagster job the schedule runs), and invoice their months",
    )
    run.add_argument("--start", required=True, type=_date, help="first day, YYYY-MM-DD (UTC)")
    run.add_argument("--end", required=True, type=_date, help="last day, inclusive, YYYY-MM-DD (UTC)")
    _config_and_clusters(
        run,
        "meter this cluster of the config only; repeat for several (default: every cluster). Each "
        "(cluster, day) is its own run of the job",
    )
    run.add_argument(
        "--replace-with-less",
        metavar="REASON",
        help="accept that a day already stored is replaced by one the source holds less of, or that bills its "
        "tenants less (a source that lost the day for good, a tenant no longer billed); without it such a day "
        "is refused and the stored one kept. Recorded in the audit log with the reason",
    )
    run.add_argument("--by", help="who accepts it (default: the login name); recorded in the audit log")
    run.set_defaults(func=commands.cmd_run)

    today = sub.add_parser(
        "today",
        help="meter the current day so far, up to the last full hour (the job the hourly schedule runs), and "
        "print each tenant's month to date with today's part apart: provisional, never invoiced, replaced by "
        "the nightly run",
    )
    _config_and_clusters(
        today, "meter this cluster of the config only; repeat for several (default: every cluster)"
    )
    today.set_defaults(func=commands.cmd_today)

    inv = sub.add_parser(
        "invoices",
        help="roll a month up (the invoice_month Dagster job) and write its exports: invoice-lines CSVs (all "
        "tenants and per tenant), the FOCUS CSV (1.2, or 1.3 by config) and one HTML invoice per tenant; a closed month's files "
        "are copied as closed",
    )
    inv.add_argument("--config", required=True, help="gpumeter YAML config")
    inv.add_argument("--period", required=True, type=_period, help="YYYY-MM")
    inv.add_argument("--out", required=True, help="directory the export files are copied to")
    inv.set_defaults(func=commands.cmd_invoices)

    close = sub.add_parser(
        "close",
        help="close a month: roll it up once more, then freeze its invoices with a content hash; "
        "late data for it is billed in the next open month as adjustment lines",
    )
    close.add_argument("--config", required=True, help="gpumeter YAML config")
    close.add_argument("--period", required=True, type=_period, help="YYYY-MM")
    close.add_argument("--by", help="who closes it (default: the login name); recorded in the audit log")
    close.add_argument("--reason", help="why, recorded in the manifest and the audit log")
    close.add_argument(
        "--allow-empty",
        action="store_true",
        help="close the month even though none of its days has been metered (it bills nothing); without it "
        "such a month is refused. Recorded in the audit log",
    )
    close.set_defaults(func=commands.cmd_close)

    reopen = sub.add_parser(
        "reopen", help="reopen a closed month (needs --reason); recorded in the audit log"
    )
    reopen.add_argument("--config", required=True, help="gpumeter YAML config")
    reopen.add_argument("--period", required=True, type=_period, help="YYYY-MM")
    reopen.add_argument("--reason", required=True, help="why it is reopened (required)")
    reopen.add_argument("--by", help="who reopens it (default: the login name)")
    reopen.set_defaults(func=commands.cmd_reopen)

    sim = sub.add_parser(
        "simulate", help="write the simulated AI factory's raw samples (Parquet, OpenMetrics)"
    )
    sim.add_argument("--out", required=True, help="directory for raw Parquet (a `parquet` source)")
    sim.add_argument("--start", type=_date, help="first day (default 2026-11-01)")
    sim.add_argument("--days", type=_days, help="number of days (default 7)")
    sim.add_argument("--seed", type=int, help="random seed (default 7)")
    sim.add_argument("--openmetrics", help="also write OpenMetrics text here, for promtool backfill")
    sim.set_defaults(func=demo.cmd_simulate)

    cfg = sub.add_parser("config", help="check a config file, print its JSON Schema or the example config")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = cfg_sub.add_parser("check", help="validate FILE; every problem is reported with its place")
    check.add_argument("file")
    check.set_defaults(func=commands.cmd_config_check)
    schema = cfg_sub.add_parser("schema", help="print the config's JSON Schema")
    schema.set_defaults(func=commands.cmd_config_schema)
    example = cfg_sub.add_parser(
        "example", help="print the example config shipped with gpumeter (the demo's), to start your own from"
    )
    example.add_argument("--path", action="store_true", help="print where the example file is instead")
    example.set_defaults(func=commands.cmd_config_example)

    source = sub.add_parser(
        "source",
        help="check what a cluster's live Prometheus holds, exporter by exporter, before billing from it",
    )
    source_sub = source.add_subparsers(dest="source_command", required=True, metavar="ACTION")
    source_check = source_sub.add_parser(
        "check",
        help="check each configured Prometheus source over a recent window: scrape paths, labels, scrape "
        "intervals, allow-lists, prices and HA replicas, with what each problem does to the bills",
        description="Check each `kind: prometheus` source of the config over a recent window and print, per "
        "exporter, what was found and what to do. Exit status: 0 when nothing found would bill wrongly "
        "(warnings included), 1 when a finding would misbill, 2 on an error (config, unreachable server).",
    )
    _config_and_clusters(
        source_check,
        "check this cluster only; repeat for several (default: every cluster with a Prometheus source)",
    )
    source_check.add_argument(
        "--at",
        type=_instant,
        metavar="ISO-TIME",
        help="end of the window (ISO 8601; without a zone, UTC; default: now)",
    )
    source_check.add_argument(
        "--window-minutes",
        type=_minutes,
        default=60,
        metavar="N",
        help="length of the window, in minutes (default: %(default)s)",
    )
    source_check.add_argument(
        "--format", choices=("text", "json"), default="text", help="a table, or JSON for machines"
    )
    source_check.set_defaults(func=commands.cmd_source_check)

    dash = sub.add_parser(
        "dashboard", help="run the finance and ops dashboard (Streamlit) on a config's warehouse"
    )
    dash.add_argument(
        "--config",
        help=f"gpumeter YAML config (default: {DEMO_DIR / 'config.yaml'}, written by `gpumeter demo`)",
    )
    dash.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    dash.add_argument("--port", type=int, default=8501, help="port (default: %(default)s)")
    dash.set_defaults(func=commands.cmd_dashboard)
    return parser


def _log_file(command: str) -> Path | None:
    """A new log file for this command: under $DAGSTER_HOME (where the runs are recorded) when it is a
    writable folder, else under the system's temp folder; None when neither can be written."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"gpumeter-{command}-{stamp}-{os.getpid()}.log"
    home = os.environ.get("DAGSTER_HOME")
    folders = [Path(home) / LOG_FOLDER] if home else []
    for folder in [*folders, Path(tempfile.gettempdir()) / LOG_FOLDER]:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).touch()
        except OSError:
            continue
        return folder / name
    return None


@contextmanager
def _events_to(log: Path | None) -> Iterator[None]:
    if log is None:
        yield
        return
    from gpumeter.pipelines.launch import event_log

    with event_log(log):
        yield


def _traceback_to(log: Path | None, exc: BaseException) -> Path | None:
    """The exception's traceback, appended to the log (a new one when the command had none)."""
    log = log or _log_file("error")
    if log is not None:
        try:
            with log.open("a", encoding="utf-8") as out:
                out.write("gpumeter: the command failed\n" + "".join(traceback.format_exception(exc)))
        except OSError:
            return log if log.exists() else None
    return log


def _say(line: str, log: Path | None) -> None:
    where = f" (the full log: {log})" if log is not None else ""
    err.print(f"[red]error[/]: {escape(line + where)}", soft_wrap=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from gpumeter.pipelines.launch import USER_ERRORS, RunFailed

    # ConfigError, SourceError, AccountingError, WarehouseError, InvoiceError (the refusals among them).
    handled: tuple[type[BaseException], ...] = (CliError, *USER_ERRORS)
    log = _log_file(args.command) if args.command in DAGSTER_COMMANDS else None
    try:
        with warnings.catch_warnings(), _events_to(log):
            warnings.simplefilter("ignore", DeprecationWarning)
            return int(args.func(args))
    except RunFailed as exc:
        # The run's events (the failed step's traceback among them) are in the log already.
        log = _traceback_to(log, exc)
        if exc.internal:
            _say(f"internal error in {exc}; this is a bug in gpumeter, please report it with the log", log)
            return 1
        _say(str(exc), log)
        return 2
    except handled as exc:
        # A command that runs no Dagster job has no log: its own line, as it always was.
        _say(str(exc), _traceback_to(log, exc) if log else None)
        return 2
    except Exception as exc:  # noqa: BLE001 - any other failure is a bug: one line and the log, no traceback
        log = _traceback_to(log, exc)
        kind = type(exc).__name__
        _say(
            f"internal error: {kind}: {' '.join(str(exc).split())}; this is a bug in gpumeter, "
            "please report it with the log",
            log,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
