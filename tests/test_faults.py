"""Faults, from real misbehaving parts: a local HTTP server that resets or trickles, corrupt Parquet files, a
full or read-only filesystem (a real tmpfs, or RLIMIT_FSIZE in a child), a real `kill -9` of the meter_day
job mid-write, and two runs of one day at once. Each ends in one clear error or a correct result, and the
day's earlier stored results are never half-written (R15; docs/reliability.md)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import gpumeter_sim as simulator
from gpumeter.cli.demo import write_demo_config
from gpumeter.config import PrometheusSource, load_config
from gpumeter.ingest.contract import SourceError, day_bounds_ms, lookback_ms
from gpumeter.ingest.parquet import ParquetRawSource
from gpumeter.ingest.prometheus import PrometheusRawSource
from gpumeter.ingest.pull import pull_raw_day
from gpumeter.ingest.schema import RAW_DCGM_SCHEMA
from gpumeter.models.runner import meter_day
from gpumeter.storage.files import WarehouseError, atomic_write_parquet
from gpumeter.storage.paths import RAW
from gpumeter.storage.warehouse import Warehouse
from tests.builders import edit_config
from tests.prometheus_fixtures import matrix_body
from tests.test_rules import make_config

REPO = Path(__file__).resolve().parent.parent
DAY = date(2026, 11, 1)
D0, D1 = day_bounds_ms(DAY)
UTIL = "DCGM_FI_DEV_GPU_UTIL"
ONE = matrix_body([({"__name__": UTIL, "Hostname": "n1", "UUID": "GPU-1"}, [(D0, "1"), (D0 + 30_000, "2")])])
REMOTE_READ_FAILED = "remote_read: error sending request: connection refused"
SECRET = "s3cr3t-token-0123456789"


# --- a raw-socket server that misbehaves mid-body ----------------------------------------------


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def misbehaving() -> Iterator[tuple[list[str], list[int]]]:
    """Yields (url holder, hits: each request's evaluation time in ms) for a server whose behaviour is set
    per test in `mode[0]`:
    `reset` sends the headers and 20 bytes of the body, then a TCP RST; `trickle` sends the body a byte
    every 50 ms (each read is within any timeout, the whole body is not); `fail` answers 500; `echo` answers
    500 with the request's headers in the body (a proxy that echoes); `incomplete` answers the samples with
    a warning that a remote-read endpoint failed (Prometheus answers with what it could read)."""
    mode: list[str] = ["reset", ""]
    hits: list[int] = []

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                request += chunk
            target = request.split(b" ", 2)[1].decode()
            hits.append(round(float(parse_qs(urlsplit(target).query)["time"][0]) * 1000))
            if mode[0] in ("echo", "fail"):
                said = request.decode() if mode[0] == "echo" else "boom"
                body = json.dumps({"status": "error", "errorType": "internal", "error": said}).encode()
                status = "500 Internal Server Error"
            elif mode[0] == "incomplete":
                body, status = (
                    json.dumps({**json.loads(ONE), "warnings": [REMOTE_READ_FAILED]}).encode(),
                    "200 OK",
                )
            else:
                body, status = ONE, "200 OK"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            try:
                self.request.sendall(head.encode())
                if mode[0] == "reset":
                    self.request.sendall(body[:20])
                    self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.request.close()
                elif mode[0] == "trickle":
                    for byte in body[:60]:
                        self.request.sendall(bytes([byte]))
                        time.sleep(0.05)
                else:
                    self.request.sendall(body)
            except OSError:
                return

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    mode[1] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield mode, hits
    finally:
        server.shutdown()
        server.server_close()


def prom_source(url: str, **spec: object) -> PrometheusRawSource:
    settings = {"retries": 2, "timeout_seconds": 0.5, "chunk_seconds": 2 * 86_400, **spec}
    return PrometheusRawSource(
        PrometheusSource(kind="prometheus", url=url, **settings),  # type: ignore[arg-type]
        cluster="c1",
        backoff_seconds=0.01,
        dcgm_metrics=(UTIL,),
        kube_metrics=(),
    )


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".locks" not in p.parts
    }


def stored_day(tmp_path: Path) -> tuple[Warehouse, dict[str, str]]:
    """A warehouse holding an earlier pull of the day (one GPU, two samples)."""
    warehouse = Warehouse.at(tmp_path / "warehouse")
    rows = pa.Table.from_pylist(
        [{"cluster": "c1", "ts_ms": D0, "metric": UTIL, "value": 5.0, "uuid": "GPU-1", "hostname": "n1"}],
        schema=RAW_DCGM_SCHEMA,
    )
    warehouse.write_day(RAW, "raw_dcgm_samples", "c1", DAY, rows)
    return warehouse, digest(warehouse.root)


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("reset", "reset"),  # a TCP reset mid-body
        (
            "incomplete",
            REMOTE_READ_FAILED,
        ),  # an answer the server says may be incomplete: its warning is named
    ],
)
def test_a_failing_answer_is_retried_then_one_error_and_the_stored_day_is_untouched(
    misbehaving: tuple[list[str], list[int]], tmp_path: Path, fault: str, said: str
) -> None:
    mode, hits = misbehaving
    mode[0] = fault
    warehouse, before = stored_day(tmp_path)
    config = make_config()
    with pytest.raises(SourceError) as info:
        pull_raw_day(config, warehouse, DAY, source_for=lambda _: prom_source(mode[1]))
    # A pull first asks for its scrape targets (`up`, over the whole window, evaluated a millisecond before its
    # end): that query spends its three attempts (retries: 2) and stops the pull, before any hour is asked.
    attempts = Counter(hits)
    assert attempts == {D1 - 1: 3}, attempts
    message = str(info.value)
    assert mode[1] in message and "3 attempt" in message and said.lower() in message.lower()
    assert digest(warehouse.root) == before


def test_a_body_trickled_slower_than_the_timeout_is_a_timeout(
    misbehaving: tuple[list[str], list[int]], tmp_path: Path
) -> None:
    mode, hits = misbehaving
    mode[0] = "trickle"  # 60 bytes at 50 ms: 3 s a body, against a 0.5 s timeout
    with pytest.raises(SourceError, match="timeout"):
        prom_source(mode[1], retries=1).fetch_day("c1", DAY, 0)
    assert len(hits) == 2


@pytest.mark.parametrize(
    "server",
    [
        "fail",
        "echo",
    ],
)
def test_a_secret_never_reaches_errors_logs_or_the_dagster_event_log(
    misbehaving: tuple[list[str], list[int]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    server: str,
) -> None:
    """A failing server (`fail`), or one that echoes the request headers (bearer token, X-Scope-OrgID) back in
    its error body (`echo`): neither secret may appear in the error, in any log record or in the Dagster
    run's events."""
    from dagster import DagsterInstance

    from gpumeter.pipelines.launch import RunFailed, meter_days

    mode, hits = misbehaving
    mode[0] = server
    monkeypatch.setenv("GPUMETER_FAULT_TOKEN", SECRET)
    monkeypatch.setenv("GPUMETER_FAULT_HEADERS", json.dumps({"X-Scope-OrgID": "org-" + SECRET[::-1]}))
    secrets = (SECRET, SECRET[::-1])
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        textwrap.dedent(
            f"""\
            clusters:
              - name: c1
                source:
                  kind: prometheus
                  url: {mode[1]}
                  bearer_token_env: GPUMETER_FAULT_TOKEN
                  headers_env: GPUMETER_FAULT_HEADERS
                  retries: 0
                  timeout_seconds: 2
            rate_card:
              models:
                - {{model: H100-80GB, aliases: ["NVIDIA H100 80GB HBM3"], price_per_gpu_hour: 3.6}}
            warehouse:
              path: {tmp_path / "warehouse"}
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    (tmp_path / "dagster").mkdir()
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RunFailed) as info:
        meter_days(str(config_path), [DAY])
    assert hits, "the server was asked"
    assert "HTTP 500" in str(info.value)
    with DagsterInstance.get() as instance:
        records = instance.get_records_for_run(instance.get_runs()[0].run_id).records
        events = "\n".join(repr(r.event_log_entry) for r in records)
    assert events
    for secret in secrets:
        assert secret not in str(info.value), "error message"
        assert secret not in caplog.text, "log records"
        assert secret not in events, "Dagster event log"


# --- Parquet source -----------------------------------------------------------------------------


def _raw_file(root: Path, day: date = DAY) -> Path:
    path = root / "raw_dcgm_samples" / "cluster=c1" / f"day={day.isoformat()}" / "data.parquet"
    path.parent.mkdir(parents=True)
    return path


def _good_rows(ts_ms: list[int]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"cluster": "c1", "ts_ms": t, "metric": UTIL, "value": 50.0, "hostname": "n1", "uuid": "GPU-1"}
            | {"model_name": "NVIDIA H100 80GB HBM3", "namespace": "ns-a", "pod": "p1"}
            for t in ts_ms
        ],
        schema=RAW_DCGM_SCHEMA,
    )


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("truncate", "not a readable Parquet file"),
        ("garbage", "not a readable Parquet file"),
        ("text_timestamps", "ts_ms is string, expected int64"),
        ("missing_column", "missing column(s) uuid"),
        ("empty_file", "not a readable Parquet file"),
    ],
)
def test_a_damaged_parquet_file_is_one_error_naming_it(tmp_path: Path, damage: str, expected: str) -> None:
    path = _raw_file(tmp_path / "source")
    good = _good_rows([D0])
    if damage == "truncate":
        pq.write_table(good, path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "garbage":
        path.write_bytes(b"PAR1" + os.urandom(200))
    elif damage == "text_timestamps":
        pq.write_table(good.set_column(1, "ts_ms", pa.array(["yesterday"])), path)
    elif damage == "missing_column":
        pq.write_table(good.drop(["uuid"]), path)
    else:
        path.write_bytes(b"")
    with pytest.raises(SourceError) as info:
        ParquetRawSource(tmp_path / "source").fetch_day("c1", DAY, 60_000)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_samples_filed_under_the_wrong_day_are_counted_not_lost(tmp_path: Path) -> None:
    """R2: the day's file holds two samples of the day, one of 1999 and one of 2100: the source passes all four
    on, the accounting bills the two and counts the other two as quarantined (timestamp_outside_day)."""
    path = _raw_file(tmp_path / "source")
    pq.write_table(_good_rows([D0, D0 + 60_000, 915_148_800_000, 4_102_444_800_000]), path)
    raw = ParquetRawSource(tmp_path / "source").fetch_day("c1", DAY, 60_000)
    assert raw.dcgm.num_rows == 4
    out = meter_day(raw, make_config(), "c1", DAY)
    quality = out["mart_data_quality"].to_pylist()
    assert [(q["observed_gpu_seconds"], q["quarantined_samples"]) for q in quality] == [(120, 2)]
    assert json.loads(quality[0]["quarantine_by_reason"]) == {
        "timestamp_outside_day": {"samples": 2, "device_samples": 2}
    }


# --- the warehouse disk ---------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 512 KiB tmpfs (needs root and mount rights; skipped elsewhere: the RLIMIT_FSIZE test covers the
    same path without privileges)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _big_table(rows: int = 400_000) -> pa.Table:
    # Random bytes do not compress: the file is about as large as the data.
    return pa.table({"blob": pa.array([os.urandom(16) for _ in range(rows // 100)] * 100, pa.binary())})


def test_a_full_disk_is_one_clear_error_and_the_previous_file_stays(small_tmpfs: Path) -> None:
    path = small_tmpfs / "marts" / "t" / "data.parquet"
    atomic_write_parquet(path, pa.table({"x": [1, 2]}))
    with pytest.raises(WarehouseError) as info:
        atomic_write_parquet(path, pa.table({"blob": pa.array([os.urandom(64) for _ in range(20_000)])}))
    assert str(path) in str(info.value) and "No space left on device" in str(info.value)
    assert "free disk space" in str(info.value)
    assert pq.read_table(path).column("x").to_pylist() == [1, 2]
    assert [p.name for p in path.parent.iterdir()] == ["data.parquet"]  # no temp file left behind


def test_a_read_only_warehouse_is_one_clear_error_before_anything_is_written(small_tmpfs: Path) -> None:
    warehouse = Warehouse.at(small_tmpfs / "warehouse")
    atomic_write_parquet(warehouse.day_path("marts", "t", "c1", DAY), pa.table({"x": [1]}))
    before = digest(warehouse.root)
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    with (
        pytest.raises(WarehouseError, match="Read-only file system") as info,
        warehouse.day_lock(DAY, cluster="c1"),
    ):
        pass
    assert "Nothing was written" in str(info.value)
    with pytest.raises(WarehouseError, match="Read-only file system"):
        atomic_write_parquet(warehouse.day_path("marts", "t", "c1", DAY), pa.table({"x": [2]}))
    assert digest(warehouse.root) == before


def test_a_file_size_limit_is_one_clear_error_in_a_child_process(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel refuse the write (EFBIG) in an unprivileged child: the same failure path
    as a full disk, on any machine."""
    path = tmp_path / "marts" / "t" / "data.parquet"
    atomic_write_parquet(path, pa.table({"x": [1, 2]}))
    code = textwrap.dedent(
        f"""
        import os, resource, signal, sys
        from pathlib import Path
        import pyarrow as pa
        from gpumeter.storage.files import WarehouseError, atomic_write_parquet
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        try:
            atomic_write_parquet(Path({str(path)!r}), pa.table({{"b": pa.array([os.urandom(64) for _ in range(20000)])}}))
        except WarehouseError as exc:
            print(exc)
            sys.exit(3)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 3, done.stderr
    assert str(path) in done.stdout and "File too large" in done.stdout and "Traceback" not in done.stderr
    assert pq.read_table(path).column("x").to_pylist() == [1, 2]
    assert [p.name for p in path.parent.iterdir()] == ["data.parquet"]
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY  # only the child


# --- a day pulled in parts (a fleet's day does not fit in memory) ----------------------------------------


def _source_day(root: Path, day: date, files: dict[str, pa.Table], row_group_size: int = 50) -> None:
    folder = root / "raw_dcgm_samples" / "cluster=c1" / f"day={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        pq.write_table(rows, folder / name, row_group_size=row_group_size)


def test_a_day_is_pulled_one_row_group_at_a_time_and_stored_whole(tmp_path: Path) -> None:
    """pull_raw_day writes a Parquet source's day part by part (one row group each), never the whole day in
    memory; what it stores is what the source holds in [day − lookback, day end) of the day before, and every
    row of the day's own files (R2: misfiled rows are counted downstream, not dropped here)."""
    source = tmp_path / "source"
    yesterday = date(2026, 10, 31)
    before = _good_rows(list(range(D0 - 600_000, D0, 30_000)))  # 20 rows, the last 120 s in the lookback
    _source_day(source, yesterday, {"data.parquet": before})
    day_a = _good_rows(list(range(D0, D0 + 300 * 60_000, 60_000)))
    day_b = _good_rows([D0 + 7, D1 + 5, 915_148_800_000] * 40)
    _source_day(source, DAY, {"part-00000.parquet": day_a, "part-00001.parquet": day_b})
    config = make_config()
    lookback = lookback_ms(config, "c1")
    assert 0 < lookback < 600_000  # part of yesterday's rows are in the window, part are not
    parts = list(ParquetRawSource(source).fetch_day_parts("c1", DAY, lookback))
    assert max(p.dcgm.num_rows for p in parts) <= 50 and len(parts) >= 300 // 50 + 120 // 50
    warehouse = Warehouse.at(tmp_path / "warehouse")
    counts = pull_raw_day(config, warehouse, DAY, source_for=lambda _: ParquetRawSource(source))
    ts = pc.field("ts_ms")
    in_lookback = before.filter((ts >= D0 - lookback) & (ts < D1))
    expected = pa.concat_tables([in_lookback, day_a, day_b])
    # Each part (a source row group) is stored in GPU order: here one GPU and series, so in time order.
    in_order = [
        row
        for rows in (in_lookback, day_a, day_b)
        for first in range(0, rows.num_rows, 50)
        for row in sorted(rows.slice(first, 50).to_pylist(), key=lambda row: row["ts_ms"])
    ]
    stored = pq.read_table(warehouse.day_path(RAW, "raw_dcgm_samples", "c1", DAY))
    assert stored.to_pylist() == in_order and counts["raw_dcgm_samples"] == expected.num_rows
    assert day_b.to_pylist() != sorted(day_b.to_pylist(), key=lambda row: row["ts_ms"])  # one part was not
    assert 0 < in_lookback.num_rows < before.num_rows
    # A table with no part is stored empty, as a whole-day write stores it.
    assert pq.read_table(warehouse.day_path(RAW, "raw_kube_samples", "c1", DAY)).num_rows == 0
    assert ParquetRawSource(source).fetch_day("c1", DAY, lookback).dcgm.equals(expected)


def test_a_damaged_file_late_in_a_parted_pull_leaves_the_stored_day_and_no_temp_file(tmp_path: Path) -> None:
    """Parts already written when the source fails are thrown away: the stored day is byte-for-byte the earlier
    pull's (R15), and neither the raw zone nor the scratch directory keeps a temp file."""
    warehouse, before = stored_day(tmp_path)
    source = tmp_path / "source"
    _source_day(source, DAY, {"part-00000.parquet": _good_rows(list(range(D0, D0 + 100 * 60_000, 60_000)))})
    damaged = source / "raw_dcgm_samples" / "cluster=c1" / f"day={DAY.isoformat()}" / "part-00001.parquet"
    damaged.write_bytes(b"PAR1" + os.urandom(200))
    with pytest.raises(SourceError) as info:
        pull_raw_day(make_config(), warehouse, DAY, source_for=lambda _: ParquetRawSource(source))
    assert str(damaged) in str(info.value)
    assert digest(warehouse.root) == before  # every file, temp files included
    assert not (warehouse.root / ".tmp").exists() or not any((warehouse.root / ".tmp").iterdir())


def test_a_full_disk_during_a_parted_pull_is_one_clear_error_and_the_stored_day_stays(
    small_tmpfs: Path,
) -> None:
    warehouse = Warehouse.at(small_tmpfs / "warehouse")
    earlier = _good_rows([D0])
    warehouse.write_day(RAW, "raw_dcgm_samples", "c1", DAY, earlier)
    source = small_tmpfs.parent / "source"
    noisy = _good_rows(list(range(D0, D0 + 20_000 * 1_000, 1_000)))
    noisy = noisy.set_column(
        noisy.schema.get_field_index("pod"), "pod", pa.array([os.urandom(24).hex() for _ in range(20_000)])
    )
    _source_day(source, DAY, {"part-00000.parquet": noisy}, row_group_size=2_000)
    with pytest.raises(WarehouseError) as info:
        pull_raw_day(make_config(), warehouse, DAY, source_for=lambda _: ParquetRawSource(source))
    assert "No space left on device" in str(info.value) and "free disk space" in str(info.value)
    stored = warehouse.day_path(RAW, "raw_dcgm_samples", "c1", DAY)
    assert pq.read_table(stored).equals(earlier)
    assert [p.name for p in stored.parent.iterdir()] == ["data.parquet"]  # no temp file left behind


# --- kill -9 and concurrent runs of the real meter_day job ------------------------------------------


@pytest.fixture(scope="module")
def small_factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One simulated day (every feature of the demo, fewer nodes, Δ = 300 s) and its config."""
    out = tmp_path_factory.mktemp("factory")
    spec = replace(simulator.demo_spec(), days=1, scrape_interval_s=300, h100_nodes=1, h200_nodes=1)
    simulator.write_parquet(spec, out / "source")
    config = edit_config(write_demo_config(out), lambda doc: doc.update(scrape_interval_seconds=300))
    assert load_config(config).scrape_interval_seconds == 300
    return config


def _with_warehouse(config: Path, warehouse: Path) -> Path:
    """The factory's config with its own warehouse."""
    return edit_config(
        config,
        lambda doc: doc["warehouse"].update(path=str(warehouse)),
        to=warehouse.parent / f"{warehouse.name}.yaml",
    )


def _run_day(config: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The real meter_day job for DAY in a child process (what `gpumeter run` and the schedule run)."""
    code = (
        "import sys; from datetime import date; from gpumeter.pipelines.launch import meter_days; "
        f"meter_days({str(config)!r}, [date.fromisoformat({DAY.isoformat()!r})]); print('done')"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return out


def _day_files(warehouse: Path) -> dict[str, object]:
    """Every stored file of the day by path inside the warehouse: raw, marts and JSON snapshots by their bytes
    (stored in a stable order, R15), staging and intermediate tables by their sorted rows (they keep the
    engine's row order)."""
    files: dict[str, object] = {}
    for name, sha in digest(warehouse).items():
        if name.startswith(".tmp") or name.endswith(".tmp"):
            continue
        if name.startswith(("staging/", "intermediate/")):
            table = pq.read_table(warehouse / name)
            files[name] = table.sort_by([(c, "ascending") for c in table.column_names]).to_pylist()
        else:
            files[name] = sha
    return files


@pytest.fixture(scope="module")
def reference(small_factory: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    warehouse = tmp_path_factory.mktemp("reference") / "warehouse"
    _finish(_run_day(_with_warehouse(small_factory, warehouse)))
    files = _day_files(warehouse)
    assert any(k.startswith("marts/tenant_daily_cost/") for k in files)
    return files


@pytest.mark.slow
def test_kill_9_mid_write_then_a_rerun_gives_identical_files(
    small_factory: Path, reference: dict[str, object], tmp_path: Path
) -> None:
    """SIGKILL the job the moment a temp file appears under the warehouse (a write in flight). Every stored
    file is then complete (readable Parquet, none half-written), and a re-run gives the reference files."""
    warehouse = tmp_path / "warehouse"
    config = _with_warehouse(small_factory, warehouse)
    process = _run_day(config)
    caught_mid_write = False
    while process.poll() is None:
        if warehouse.exists() and any(warehouse.rglob(".*.tmp")):
            os.kill(process.pid, signal.SIGKILL)
            caught_mid_write = True
            break
    process.wait()
    assert caught_mid_write, "the job finished before a write could be caught: nothing was tested"
    assert process.returncode == -signal.SIGKILL
    for path in warehouse.rglob("data.parquet"):
        pq.read_table(path)  # complete files only: a half-written one would not open
    _finish(_run_day(config))
    assert _day_files(warehouse) == reference
    assert not list(warehouse.rglob(".*.tmp")), "the killed writer's temp files are swept"


@pytest.mark.slow
def test_two_runs_of_one_day_at_once_serialize_and_give_the_reference(
    small_factory: Path, reference: dict[str, object], tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    config = _with_warehouse(small_factory, warehouse)
    first, second = _run_day(config), _run_day(config)
    assert "done" in _finish(first) and "done" in _finish(second)
    assert _day_files(warehouse) == reference


def test_a_run_that_cannot_get_the_day_lock_fails_cleanly_and_writes_nothing(
    small_factory: Path, tmp_path: Path
) -> None:
    warehouse_dir = tmp_path / "warehouse"
    config = _with_warehouse(small_factory, warehouse_dir)
    warehouse = Warehouse.at(warehouse_dir)
    with warehouse.day_lock(DAY, cluster="demo"):  # R15: the job's one (cluster, day) partition
        process = _run_day(config, env={"GPUMETER_LOCK_TIMEOUT_SECONDS": "0"})
        out, err = process.communicate(timeout=600)
    assert process.returncode != 0
    assert f"cluster demo day {DAY.isoformat()} is being written by pid {os.getpid()}" in err
    assert "GPUMETER_LOCK_TIMEOUT_SECONDS" in err
    assert not list(warehouse_dir.rglob("data.parquet"))
