"""A failed command reads as one line on stderr, never a stack trace: its cause, what to do and the log file
that holds Dagster's event stream and the traceback; exit 2 for a user's or a source's problem, 1 for a bug.
Each test runs the CLI as a real process, as a person or a scheduler does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpumeter.cli.main import build_parser
from gpumeter.config import EXAMPLE_CONFIG

LOG = re.compile(r"\(the full log: (?P<path>.+\.log)\)$")


def _config(tmp_path: Path, warehouse: str = "warehouse") -> Path:
    """The example config in tmp_path: its source is tmp_path/source (not written), its warehouse beside."""
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8")
    assert "\n  path: warehouse\n" in text
    config = tmp_path / "config.yaml"
    config.write_text(text.replace("\n  path: warehouse\n", f"\n  path: {warehouse}\n"), encoding="utf-8")
    return config


def _gpumeter(
    tmp_path: Path, *args: str, dagster_home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    home = dagster_home or tmp_path / "dagster"
    if dagster_home is None:
        home.mkdir(exist_ok=True)
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    env = {**os.environ, "DAGSTER_HOME": str(home), "TMPDIR": str(temp)}
    return subprocess.run(
        [sys.executable, "-m", "gpumeter", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str], code: int) -> tuple[str, Path]:
    """The one line the failed command printed, and the log file it names (which exists)."""
    assert done.returncode == code, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "dagster._core" not in done.stderr
    assert "Traceback" not in done.stdout and "dagster._core" not in done.stdout
    line = lines[0]
    assert line.startswith("error: "), line
    found = LOG.search(line)
    assert found, line
    log = Path(found["path"])
    assert log.is_file(), log
    return line, log


def test_help_says_where_the_log_goes() -> None:
    assert "gpumeter-logs" in " ".join(build_parser().format_help().split())


@pytest.mark.parametrize("source", ["missing", "corrupt"])
def test_a_run_on_a_bad_source_is_one_line_and_exit_2(tmp_path: Path, source: str) -> None:
    config = _config(tmp_path)
    if source == "corrupt":
        day = tmp_path / "source" / "raw_dcgm_samples" / "cluster=demo" / "day=2026-11-01"
        day.mkdir(parents=True)
        (day / "data.parquet").write_bytes(b"PAR1 not a Parquet file")
    done = _gpumeter(tmp_path, "run", "--config", str(config), "--start", "2026-11-01", "--end", "2026-11-01")
    line, log = _one_line(done, 2)
    assert line.startswith("error: meter_day cluster demo day 2026-11-01: ")
    assert "SourceError" not in line  # the cause in words, not the exception's class
    if source == "missing":
        assert "does not exist; run `gpumeter simulate` first" in line
    else:
        assert "data.parquet: not a readable Parquet file" in line and "re-create it" in line
    assert log.parent == tmp_path / "dagster" / "gpumeter-logs" and log.name.startswith("gpumeter-run-")
    text = log.read_text(encoding="utf-8")
    # Dagster's event stream (the failed step with its stack trace), then the CLI's own traceback.
    assert "STEP_FAILURE" in text and "Stack Trace:" in text and "gpumeter/ingest/parquet.py" in text
    assert "gpumeter.ingest.contract.SourceError" in text and "Traceback (most recent call last)" in text


def test_a_bug_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """Not a problem of the config, a source, the warehouse or a month: a DAGSTER_HOME that is a file makes
    Dagster itself fail, which gpumeter does not handle as a user's error; its log falls back to the temp
    folder (that DAGSTER_HOME cannot hold it)."""
    config = _config(tmp_path)
    home = tmp_path / "not-a-folder"
    home.write_text("")
    done = _gpumeter(
        tmp_path,
        "run",
        "--config",
        str(config),
        "--start",
        "2026-11-01",
        "--end",
        "2026-11-01",
        dagster_home=home,
    )
    line, log = _one_line(done, 1)
    assert line.startswith("error: internal error: DagsterInvariantViolationError: ")
    assert "is not a directory" in line and "bug" in line
    assert log.parent == tmp_path / "tmp" / "gpumeter-logs"
    text = log.read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text and "DagsterInvariantViolationError" in text


def test_today_fails_the_same(tmp_path: Path) -> None:
    if datetime.now(UTC).hour == 0:
        pytest.skip("between 00:00 and 01:00 UTC the day has no full hour: `gpumeter today` runs nothing")
    done = _gpumeter(tmp_path, "today", "--config", str(_config(tmp_path)))
    line, log = _one_line(done, 2)
    assert line.startswith("error: meter_today cluster demo: raw source directory ")
    assert "does not exist; run `gpumeter simulate` first" in line
    assert log.name.startswith("gpumeter-today-")
    assert "STEP_FAILURE" in log.read_text(encoding="utf-8")


def test_invoices_fail_the_same(tmp_path: Path) -> None:
    (tmp_path / "warehouse-file").write_text("")  # a warehouse that is a file: nothing can be written in it
    config = _config(tmp_path, warehouse="warehouse-file")
    done = _gpumeter(
        tmp_path, "invoices", "--config", str(config), "--period", "2026-11", "--out", str(tmp_path / "out")
    )
    line, log = _one_line(done, 2)
    assert line.startswith("error: invoice_month 2026-11-01: could not write ")
    assert "fix permissions on the warehouse" in line
    assert log.name.startswith("gpumeter-invoices-")
    assert "STEP_FAILURE" in log.read_text(encoding="utf-8")
