"""A user's mistake on the command line is one line saying what is wrong and what to do, exit code 2, never a
traceback; empty days and months are said to be empty; the hints printed run as printed (issue 46, "A command
line with no traceback for a user's mistake").

The CLI is called as a person calls it: its `main([...])` in this process, or `python -m gpumeter` as a real
process where the whole console matters. Files are real; the expected lines are written out by hand."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import pytest
from test_invoices import CONFIG
from test_periods import D_NOV, NOV_ROWS, _store

from gpumeter.cli import demo
from gpumeter.cli.main import build_parser, main
from gpumeter.config import DEMO_DIR, EXAMPLE_CONFIG
from gpumeter.pipelines import launch
from gpumeter.storage import audit
from gpumeter.storage.warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
LOG = re.compile(r" \(the full log: [^)]*\)$")
TODAY = datetime.now(UTC).date()


@pytest.fixture(autouse=True)
def _dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs and their logs in the test's folder; the working folder too (hints name relative paths)."""
    home = tmp_path / "dagster"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.chdir(tmp_path)


def _demo_config(tmp_path: Path, source: bool = True) -> Path:
    """The example config in tmp_path: its source is tmp_path/source (an empty folder, or none), its warehouse
    tmp_path/warehouse."""
    if source:
        (tmp_path / "source").mkdir()
    config = tmp_path / "config.yaml"
    config.write_text(EXAMPLE_CONFIG.read_text(encoding="utf-8"), encoding="utf-8")
    return config


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused command printed on stderr, without the log it names last; nothing on stdout."""
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in captured.err + captured.out
    return LOG.sub("", lines[0])


def _hint(text: str, command: str) -> list[str]:
    """The arguments of the `gpumeter COMMAND …` hint in `text` (one line, as the console may wrap it)."""
    found = re.search(rf"`gpumeter ({command} [^`]*)`", " ".join(text.split()))
    assert found, text
    return shlex.split(found.group(1))


def _no_dagster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Dagster job launched from here fails the test: a refusal comes before Dagster starts."""

    def started(*_: object, **__: object) -> None:
        raise AssertionError("a Dagster job was launched")

    monkeypatch.setattr(launch, "meter_days", started)
    monkeypatch.setattr(launch, "invoice_month", started)


# --- 1. days and months the jobs have no partition for ---------------------------------------------------


@pytest.mark.parametrize(
    ("day", "why"),
    [
        (TODAY + timedelta(days=1), "it is after today (UTC): it has no samples yet"),
        (date(2023, 12, 31), "it is before 2024-01-01, the first day gpumeter meters"),
    ],
)
def test_a_day_outside_what_can_be_metered_is_refused_before_dagster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], day: date, why: str
) -> None:
    _no_dagster(monkeypatch)
    config = _demo_config(tmp_path)
    code = main(["run", "--config", str(config), "--start", str(day), "--end", str(day)])
    assert code == 2
    assert _one_line(capsys) == (
        f"error: {day} cannot be metered: {why}; the days that can be metered are 2024-01-01 to {TODAY} "
        "(today, UTC)"
    )


def test_a_range_reaching_past_today_names_its_first_day_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_dagster(monkeypatch)
    config = _demo_config(tmp_path)
    end = TODAY + timedelta(days=3)
    assert main(["run", "--config", str(config), "--start", str(TODAY), "--end", str(end)]) == 2
    assert _one_line(capsys).startswith(f"error: {TODAY + timedelta(days=1)} cannot be metered: ")


def _next_month(day: date) -> str:
    following = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
    return f"{following:%Y-%m}"


@pytest.mark.parametrize("command", ["invoices", "close"])
@pytest.mark.parametrize("when", ["future", "early"])
def test_a_month_outside_what_can_be_invoiced_is_refused_before_dagster(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    when: str,
) -> None:
    _no_dagster(monkeypatch)
    config = _demo_config(tmp_path)
    period = _next_month(TODAY) if when == "future" else "2023-12"
    extra = ["--out", str(tmp_path / "out")] if command == "invoices" else []
    assert main([command, "--config", str(config), "--period", period, *extra]) == 2
    verb = "invoiced" if command == "invoices" else "closed"
    why = (
        "it is after the current month: none of its days has happened yet"
        if when == "future"
        else "it is before 2024-01, the first month gpumeter meters"
    )
    assert _one_line(capsys) == (
        f"error: {period} cannot be {verb}: {why}; the months that can be are 2024-01 to {TODAY:%Y-%m} "
        "(the current month, UTC)"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "warehouse" / "periods").exists()


# --- 2. a number of days that is not one ----------------------------------------------------------------


@pytest.mark.parametrize("command", ["simulate", "demo"])
@pytest.mark.parametrize("days", ["0", "-2", "two"])
def test_days_must_be_a_positive_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, days: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--out", str(tmp_path / "out"), "--days", days])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: gpumeter {command} ")
    assert err.splitlines()[-1] == (
        f"gpumeter {command}: error: argument --days: '{days}' is not a positive number of days"
    )
    assert not (tmp_path / "out").exists()


# --- 3. a Parquet source folder that does not exist; a typo in the config -----------------------------


def test_a_run_on_a_missing_source_folder_is_one_line_on_the_console(tmp_path: Path) -> None:
    """As a real process: nothing of Dagster's stack on stdout or stderr, one line, exit 2."""
    config = _demo_config(tmp_path, source=False)
    done = subprocess.run(
        [sys.executable, "-m", "gpumeter", "run", "--config", str(config), "--start", "2026-11-01"]
        + ["--end", "2026-11-01"],
        cwd=tmp_path,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster"), "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert LOG.sub("", lines[0]) == (
        f"error: meter_day cluster demo day 2026-11-01: raw source directory {tmp_path / 'source'} does not "
        "exist; run `gpumeter simulate` first"
    )
    assert "Traceback" not in done.stdout and "dagster" not in done.stdout.lower()


def test_config_check_names_a_missing_source_folder_and_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _demo_config(tmp_path, source=False)
    assert "      path: source\n" in config.read_text()  # line 11 of the example
    assert main(["config", "check", str(config)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        f"missing {config}: clusters[0].source.path (line 11): the source folder {tmp_path / 'source'} does not "
        f"exist: correct the path, or write raw samples there first (`gpumeter simulate --out "
        f"{tmp_path / 'source'}` writes simulated ones)"
    ) in out
    assert out.endswith("0 warning(s), 1 source folder(s) missing: a run stops on each")
    (tmp_path / "source").mkdir()
    assert main(["config", "check", str(config)]) == 0
    out = capsys.readouterr().out
    assert "missing" not in out and out.rstrip().endswith("0 warning(s)")


def test_config_check_suggests_the_field_a_typo_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "typo.yaml"
    config.write_text(
        "currency: USD\n"  # line 1
        "clusters:\n"
        "  - name: demo\n"
        "    source: {kind: parquet, path: source, pth: x}\n"  # line 4: a key of the Parquet source
        "rate_card:\n"
        "  modles: []\n"  # line 6
        "tenant:\n"  # line 7
        "  - {name: a, namespaces: [a]}\n"
        "scrape_intervall_seconds: 30\n"  # line 9
        "colour: blue\n",  # line 10: nothing like it
        encoding="utf-8",
    )
    assert main(["config", "check", str(config)]) == 2
    err = capsys.readouterr().err
    lines = [LOG.sub("", line) for line in err.splitlines()]
    assert lines == [
        f"error: {config}: clusters[0].source.pth (line 4): Extra inputs are not permitted: not a field here; "
        "did you mean `path`?",
        f"{config}: rate_card.modles (line 6): Extra inputs are not permitted: not a field here; did you mean "
        "`models`?",
        f"{config}: tenant (line 7): Extra inputs are not permitted: not a field here; did you mean `tenants`?",
        f"{config}: scrape_intervall_seconds (line 9): Extra inputs are not permitted: not a field here; did you "
        "mean `scrape_interval_seconds`?",
        f"{config}: colour (line 10): Extra inputs are not permitted: not a field here (docs/config.md lists "
        "every field)",
    ]


# --- 4. the version ---------------------------------------------------------------------------------------


def test_version(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpumeter", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"gpumeter {version('gpumeter')}\n", "")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", version("gpumeter"))
    assert "--version" in build_parser().format_help()


# --- 5 and 6. empty days and months, and hints that run as printed ------------------------------------------


def test_an_empty_day_and_month_are_said_so_and_close_needs_allow_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty source folder: the day is metered as empty and said so; the month is not offered to close;
    closing it is refused with the two commands to run, and the printed `--allow-empty` one closes it (and
    audits it); reopening it prints the command that rolls it up again, which runs as printed."""
    config = _demo_config(tmp_path)
    argv = ["--config", str(config)]
    assert main(["run", *argv, "--start", "2026-11-01", "--end", "2026-11-01"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "no samples for cluster demo 2026-11-01: the source holds no GPU sample for this day, so nothing is "
        "billed for it; if GPUs ran then, check the source and meter it again"
    ) in out
    assert (
        "2026-11: none of the days of 2026-11 has been metered with GPU samples, so it bills nothing; meter "
        f"its days with `gpumeter run --config {config} --start 2026-11-01 --end 2026-11-30`"
    ) in out

    assert main(["invoices", *argv, "--period", "2026-11", "--out", str(tmp_path / "out")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "2026-11: nothing billed: none of the days of 2026-11 has been metered with GPU samples" in out
    assert "close" not in out

    assert main(["close", *argv, "--period", "2026-11", "--by", "cfo"]) == 2
    line = _one_line(capsys)
    assert line == (
        f"error: 2026-11 cannot be closed: none of the days of 2026-11 has been metered with GPU samples, so it "
        f"bills nothing; meter its days with `gpumeter run --config {config} --start 2026-11-01 --end "
        "2026-11-30`, then close it; or, if it truly bills nothing, close it empty with `gpumeter close "
        f"--config {config} --period 2026-11 --allow-empty`"
    )
    warehouse = Warehouse.at(tmp_path / "warehouse")
    assert audit.read_audit(warehouse) == []

    # The hint, run as printed.
    assert main(_hint(line, "close")) == 0
    capsys.readouterr()
    (event,) = audit.read_audit(warehouse)
    assert {k: event[k] for k in ("event", "period", "empty", "line_count", "total")} == {
        "event": "close",
        "period": "2026-11",
        "empty": True,
        "line_count": 0,
        "total": "0.00",
    }

    assert main(["reopen", *argv, "--period", "2026-11", "--reason", "metered too early"]) == 0
    out = capsys.readouterr().out
    hint = _hint(out, "invoices")
    assert hint == ["invoices", "--config", str(config), "--period", "2026-11", "--out", "invoices-2026-11"]
    assert main(hint) == 0  # as printed, from the folder it was printed in
    assert (tmp_path / "invoices-2026-11" / "invoice_lines_2026-11_all.csv").is_file()


def test_the_close_hint_of_a_draft_month_runs_as_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A month with a metered day (by hand: 4.00 + 2.00 + 4.00 on 2026-11-30) is a draft after `invoices`,
    whose line says how to close it; that command closes it, and nothing is said about an empty month."""
    warehouse = Warehouse.at(tmp_path / "wh")
    _store(warehouse, D_NOV, NOV_ROWS)
    config = tmp_path / "config.yaml"
    config.write_text(
        CONFIG.format(currency="USD") + f"warehouse: {{path: {json.dumps(str(warehouse.root))}}}\n",
        encoding="utf-8",
    )
    assert main(["invoices", "--config", str(config), "--period", "2026-11", "--out", "out"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"2026-11: draft (close it with `gpumeter close --config {config} --period 2026-11`)" in out
    assert "nothing billed" not in out
    assert main(_hint(out, "close")) == 0
    assert "2026-11: closed " in capsys.readouterr().out
    (event,) = audit.read_audit(warehouse)
    assert event["event"] == "close" and event["total"] == "10.00" and "empty" not in event


# --- 7. `make dagster-ui` reads the runs `make demo` recorded -----------------------------------------------


def test_make_dagster_ui_uses_the_demos_dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make demo` runs `gpumeter demo` from the checkout with its default --out; the DAGSTER_HOME the demo
    then records its runs in is the one `make dagster-ui` gives Dagster (`make -n` prints it, runs nothing)."""
    monkeypatch.delenv("DAGSTER_HOME")
    demo._use_demo_dagster_home(Path(str(DEMO_DIR)))  # what `gpumeter demo` does, here in tmp_path
    demo_home = Path(os.environ["DAGSTER_HOME"]).relative_to(tmp_path)
    printed = subprocess.run(
        ["make", "-n", "-C", str(REPO), "dagster-ui"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    found = re.search(r"DAGSTER_HOME=(\S+) GPUMETER_CONFIG=(\S+)", printed)
    assert found, printed
    assert Path(found[1]).relative_to(REPO) == demo_home == Path(".gpumeter/demo/dagster")
    assert Path(found[2]).relative_to(REPO) == DEMO_DIR / "config.yaml"


# --- 8. bad arguments of every subcommand: a usage and one error line, exit 2 ------------------------------

BAD_ARGUMENTS = [
    (["demo", "--days", "0"], "gpumeter demo"),
    (["run", "--config", "c.yaml", "--end", "2026-11-01"], "gpumeter run"),
    (["run", "--config", "c.yaml", "--start", "2026-13-01", "--end", "2026-11-01"], "gpumeter run"),
    (["today"], "gpumeter today"),
    (["invoices", "--config", "c.yaml", "--period", "2026-11"], "gpumeter invoices"),
    (["invoices", "--config", "c.yaml", "--period", "2026-1", "--out", "o"], "gpumeter invoices"),
    (["close", "--config", "c.yaml"], "gpumeter close"),
    (["close", "--config", "c.yaml", "--period", "2026-1"], "gpumeter close"),
    (["reopen", "--config", "c.yaml", "--period", "2026-11"], "gpumeter reopen"),
    (["reopen", "--config", "c.yaml", "--period", "2026-1", "--reason", "r"], "gpumeter reopen"),
    (["simulate"], "gpumeter simulate"),
    (["simulate", "--out", "o", "--start", "2026-13-01"], "gpumeter simulate"),
    (["config"], "gpumeter config"),
    (["config", "check"], "gpumeter config check"),
    (["config", "schema", "extra"], "gpumeter"),  # an argument nothing takes: the top parser says so
    (["config", "example", "--bogus"], "gpumeter"),
    (["source"], "gpumeter source"),
    (["source", "check"], "gpumeter source check"),
    (["source", "check", "--config", "c.yaml", "--at", "yesterday"], "gpumeter source check"),
    (["source", "check", "--config", "c.yaml", "--window-minutes", "0"], "gpumeter source check"),
    (["dashboard", "--port", "eighty"], "gpumeter dashboard"),
    (["bill"], "gpumeter"),
    ([], "gpumeter"),
]


@pytest.mark.parametrize(
    ("argv", "prog"), BAD_ARGUMENTS, ids=[" ".join(a) or "nothing" for a, _ in BAD_ARGUMENTS]
)
def test_bad_arguments_are_a_usage_and_one_error_line(
    argv: list[str], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0].startswith(f"usage: {prog} ")
    errors = [line for line in lines if "error:" in line]
    assert errors == [lines[-1]] and lines[-1].startswith(f"{prog}: error: "), captured.err
    assert "Traceback" not in captured.err


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every (sub)command of the parser, as the words that name it: ("run",), ("config", "check"), …"""
    found: set[tuple[str, ...]] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found |= {(*prefix, name)} | _commands(child, (*prefix, name))
    return found


def test_every_subcommand_has_a_bad_arguments_case() -> None:
    tried = {tuple(argv[:depth]) for argv, _ in BAD_ARGUMENTS for depth in (1, 2)}
    assert _commands(build_parser()) <= tried
