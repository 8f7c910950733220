"""Fleet-scale benchmark: gpumeter against the per-sample floor, the single-pass limit and PromQL, in one run.

    .venv/bin/python -m bench.fleet run --gpus 10000 --work /var/tmp/gpumeter-bench --out bench/results

Every measured step runs in its own child process, so that its peak RSS (the child's VmHWM, what
`/usr/bin/time -v` prints as "Maximum resident set size" for a process started small) is its own; the wall
time is measured by the child around the work only (interpreter start-up excluded). Steps (bench/README.md):

  generate      simulator → raw zone of a warehouse, streamed by node groups (not a target)
  kube_spans    the raw kube rows stored as spans, as the pull stores them (the pull's cost, not a target)
  meter         (a) gpumeter: one (cluster, day) from raw Parquet to marts (gpumeter.billing.month)
  single_pass   (b) one DuckDB GROUP BY over the same raw Parquet: held seconds per pod
  sample_floor  (b') one GROUP BY at the sample's grain first (each sample counted once, R1), then per pod
  promql        (d) sum by namespace of count_over_time × price, against a real Prometheus
  prom_pull     (e) gpumeter's Prometheus pull of that day, staged part by part (gpumeter.billing.month.pull_raw_day)
  bare_http     the same HTTP requests as (e), replayed with urllib in the same encoding: bodies fetched
                (and gunzipped), nothing parsed
  rollup        the monthly invoice roll-up (gpumeter.billing.month.roll_up_month)
  dashboard     every page of the app through Streamlit's AppTest, one viewer (the slowest page)
  dashboard_viewers  `--viewers` viewers at once through the real server (each viewer's slowest page)

The machine is shared and noisy: ratios of steps measured side by side are the figures to read.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumeter.dashboard import APP as DASHBOARD_APP

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

    from gpumeter.config import Config

REPO = Path(__file__).resolve().parent.parent
CLUSTER = "fleet"


@dataclass
class Measure:
    step: str
    fleet_gpus: int
    wall_s: float
    samples: int
    peak_rss_mib: float = 0.0
    cpu_s: float = 0.0  # user + system CPU of the whole child (start-up included): robust to a busy machine
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_s if self.wall_s else 0.0


# --- workspace -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workspace:
    """One fleet's files: its warehouse (raw zone written by the simulator) and its config."""

    root: Path
    gpus: int
    days: int

    @property
    def warehouse(self) -> Path:
        return self.root / "warehouse"

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def start(self) -> date:
        from gpumeter_sim import fleet_spec

        return fleet_spec(self.gpus).start

    @property
    def day_list(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range(self.days)]

    def raw_files(self, table: str, day: date) -> list[Path]:
        folder = self.warehouse / "raw" / table / f"cluster={CLUSTER}" / f"day={day.isoformat()}"
        return sorted(folder.glob("*.parquet"))


def write_config(ws: Workspace) -> Path:
    """The demo config with the fleet's cluster and warehouse, storing marts only (docs/deploy.md)."""
    from gpumeter.config import EXAMPLE_CONFIG

    # The example's relative paths (source/, warehouse/) are relative to the config: the workspace's own.
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8")
    text = text.replace("  - name: demo\n", f"  - name: {CLUSTER}\n")
    text += "  persist_models: marts\n"
    ws.root.mkdir(parents=True, exist_ok=True)
    ws.config_path.write_text(text, encoding="utf-8")
    return ws.config_path


def _rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def _day_samples(ws: Workspace, day: date) -> int:
    """The day's raw samples: DCGM rows and kube samples (a kube file of spans stands for many)."""
    import pyarrow.parquet as pq

    from gpumeter.ingest.kube_spans import is_spans, span_samples

    kube = ws.raw_files("raw_kube_samples", day)
    spans = [f for f in kube if is_spans(pq.read_schema(f))]
    rows = [f for f in kube if f not in spans]
    return _rows(ws.raw_files("raw_dcgm_samples", day)) + _rows(rows) + span_samples(spans)


# --- steps (run in a child process each) --------------------------------------------------------


def step_generate(ws: Workspace) -> Measure:
    from gpumeter.config import load_config
    from gpumeter.ingest.contract import lookback_ms
    from gpumeter_sim import fleet_spec, write_parquet

    config = load_config(write_config(ws))
    started = time.perf_counter()
    write_parquet(
        fleet_spec(ws.gpus, CLUSTER, ws.days),
        ws.warehouse / "raw",
        lookback_s=lookback_ms(config, CLUSTER) // 1000,
    )
    wall = time.perf_counter() - started
    return Measure("generate", ws.gpus, wall, sum(_day_samples(ws, d) for d in ws.day_list))


def step_kube_spans(ws: Workspace) -> Measure:
    """The raw kube rows the simulator wrote, stored as spans the way the pull stores them
    (gpumeter.ingest.kube_spans; the pull's cost, not (a)'s). A day stored as spans already is left as it is."""
    import pyarrow.parquet as pq

    from gpumeter.config import load_config
    from gpumeter.ingest.kube_spans import convert_files, is_spans

    config = load_config(ws.config_path)
    samples = spans = 0
    started = time.perf_counter()
    for day in ws.day_list:
        files = ws.raw_files("raw_kube_samples", day)
        if not files or any(is_spans(pq.read_schema(f)) for f in files):
            continue
        into = files[0].with_name("spans.parquet")
        day_samples, day_spans = convert_files(
            files, into, config.warehouse.memory_limit, ws.root / ".spans-tmp"
        )
        for f in files:
            f.unlink()
        samples, spans = samples + day_samples, spans + day_spans
    wall = time.perf_counter() - started
    return Measure("kube_spans", ws.gpus, wall, samples, extra={"spans": spans})


def step_meter(ws: Workspace, day: date) -> Measure:
    from gpumeter.config import load_config
    from gpumeter.models.partition import meter_partition_day
    from gpumeter.models.project import Model
    from gpumeter.storage.warehouse import Warehouse

    config = load_config(ws.config_path)
    model_seconds: dict[str, float] = {}  # where (a)'s time goes, from the same run (bench/README.md)
    last = [0.0]

    def on_model(model: Model) -> None:
        now = time.perf_counter()
        model_seconds[model.name] = round(now - last[0], 2)
        last[0] = now

    started = last[0] = time.perf_counter()
    counts, _ = meter_partition_day(
        config, Warehouse.of(config.warehouse), day, clusters=[CLUSTER], on_model=on_model
    )
    wall = time.perf_counter() - started
    return Measure(
        "meter",
        ws.gpus,
        wall,
        _day_samples(ws, day),
        extra={
            "day": day.isoformat(),
            "device_seconds_rows": counts.get("mart_device_seconds", 0),
            "model_seconds": model_seconds,
        },
    )


@contextmanager
def _duckdb_session(ws: Workspace, config: Config) -> Iterator[DuckDBPyConnection]:
    """The DuckDB session of (b) and (b′): the threads (2) and memory limit a metering run has, spilling
    under the workspace (removed after)."""
    import duckdb

    spill = ws.root / ".duckdb-tmp"
    con = duckdb.connect()
    try:
        con.execute("set threads to 2")
        con.execute("set memory_limit = ?", [config.warehouse.memory_limit])
        con.execute("set temp_directory = ?", [str(spill)])
        yield con
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)


def _duckdb_files(files: list[Path]) -> str:
    return "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in files) + "]"


def step_single_pass(ws: Workspace, day: date) -> Measure:
    from gpumeter.config import load_config
    from gpumeter.ingest.contract import day_bounds_ms
    from gpumeter.ingest.schema import DCGM_GR_ENGINE_ACTIVE

    config = load_config(ws.config_path)
    start_ms, end_ms = day_bounds_ms(day)
    files = ws.raw_files("raw_dcgm_samples", day)
    with _duckdb_session(ws, config) as con:
        started = time.perf_counter()
        rows = con.execute(
            f"select namespace, pod, count(*) * ? as held_seconds from read_parquet({_duckdb_files(files)}) "
            "where metric = ? and pod is not null and ts_ms >= ? and ts_ms < ? group by all",
            [config.scrape_interval_seconds, DCGM_GR_ENGINE_ACTIVE, start_ms, end_ms],
        ).fetchall()
        wall = time.perf_counter() - started
    return Measure("single_pass", ws.gpus, wall, _rows(files), extra={"pods": len(rows)})


def step_sample_floor(ws: Workspace, day: date) -> Measure:
    """(b') The least an accounting that counts every sample once (R1) must do: one GROUP BY over the same
    DCGM rows at the sample's grain (device series × holder × timestamp; every metric's row proves the
    sample, R4), then held seconds per pod. (b) counts rows, so a duplicated or shared series counts twice
    (the PromQL failure); the step from (b) to (b') is the price of not double-counting, before any rule."""

    from gpumeter.config import load_config
    from gpumeter.ingest.contract import day_bounds_ms

    config = load_config(ws.config_path)
    start_ms, end_ms = day_bounds_ms(day)
    files = ws.raw_files("raw_dcgm_samples", day)
    with _duckdb_session(ws, config) as con:
        started = time.perf_counter()
        rows = con.execute(
            "with samples as (select uuid, gpu_i_id, namespace, pod, container, ts_ms "
            f"from read_parquet({_duckdb_files(files)}) where ts_ms >= ? and ts_ms < ? group by all) "
            "select namespace, pod, count(*) * ? as held_seconds from samples where pod is not null group by all",
            [start_ms, end_ms, config.scrape_interval_seconds],
        ).fetchall()
        wall = time.perf_counter() - started
    return Measure("sample_floor", ws.gpus, wall, _rows(files), extra={"pods": len(rows)})


def _prices(config_path: Path) -> dict[str, float]:
    """modelName -> price per GPU-hour, from the rate card the config resolves (R8)."""
    from gpumeter.config import load_config
    from gpumeter.models.device_classes import resolve_device_class
    from gpumeter_sim import MODELS

    config = load_config(config_path)
    return {
        m.model_name: float(resolve_device_class(config, m.model_name, None, "bench").gpu_price_per_hour)
        for m in MODELS.values()
    }


def step_rollup(ws: Workspace) -> Measure:
    from gpumeter.billing.month import roll_up_month
    from gpumeter.config import load_config
    from gpumeter.storage.warehouse import Warehouse

    config = load_config(ws.config_path)
    started = time.perf_counter()
    summary = roll_up_month(config, Warehouse.of(config.warehouse), ws.start.isoformat())
    wall = time.perf_counter() - started
    return Measure(
        "rollup",
        ws.gpus,
        wall,
        summary.line_count,
        extra={"days": summary.day_count, "ok": summary.reconciliation.ok},
    )


def dashboard_pages() -> tuple[str, ...]:
    """Every finance page of the app, as the navigation declares them (imported when the step runs)."""
    from gpumeter.dashboard.navigation import pages

    return tuple(page.name for page in pages("finance"))


def step_dashboard(ws: Workspace) -> Measure:
    """Every finance page of the Streamlit app over the workspace's marts, through Streamlit's AppTest (the
    server-side script run of a page view). wall_s is the slowest page; samples: mart rows on disk."""
    from streamlit.testing.v1 import AppTest

    os.environ["GPUMETER_CONFIG"] = str(ws.config_path)
    os.environ["GPUMETER_DASHBOARD_VIEWER"] = "finance"
    app = str(DASHBOARD_APP)
    at = AppTest.from_file(app, default_timeout=600).run()  # first run: imports, not a page view
    pages: dict[str, float] = {}
    for page in dashboard_pages():
        started = time.perf_counter()
        at.switch_page(f"screens/{page}.py").run()
        pages[page] = round(time.perf_counter() - started, 3)
        if at.exception:
            raise SystemExit(f"dashboard page {page} failed: {[e.value for e in at.exception]}")
    marts = _rows(sorted((ws.warehouse / "marts").glob("*/cluster=*/day=*/data.parquet")))
    return Measure("dashboard", ws.gpus, max(pages.values()), marts, extra={"pages": pages})


@contextmanager
def dashboard_server(
    ws: Workspace,
    log: Path,
    cache_mb: int | None = None,
    flags: tuple[str, ...] = (),
    warmup_s: float = 0,
) -> Iterator[str]:
    """`streamlit run` of the app on 127.0.0.1 over the workspace (finance in local mode); yields its URL.
    `cache_mb` sets the dashboard's read cache (0: off), None leaves the default; `flags` are more options
    of `streamlit run`; `warmup_s` the seconds between warm-up rounds (0: no warm-up)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "GPUMETER_CONFIG": str(ws.config_path), "GPUMETER_DASHBOARD_VIEWER": "finance",
           "GPUMETER_DASHBOARD_WARMUP_S": str(warmup_s)}  # fmt: skip
    if cache_mb is not None:
        env["GPUMETER_DASHBOARD_CACHE_MB"] = str(cache_mb)
    command = [str(Path(sys.executable).parent / "streamlit"), "run", str(DASHBOARD_APP),
               "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true",
               "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", *flags]  # fmt: skip
    with open(log, "w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"the dashboard server did not start: {log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.2)
        yield url
    finally:
        dashboard_server.peak_rss_mib = _vm_hwm_mib(server.pid)  # type: ignore[attr-defined]
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


class DashboardSession:
    """One viewer of the real server: a browser's websocket session, speaking Streamlit's protocol (a rerun
    request per page view, the page's messages until the script run has finished). A page view's time is
    from the request to the end of its script run: the server's time, as a browser waits for it."""

    def __init__(self, url: str):
        from websockets.sync.client import connect

        self._stack = ExitStack()
        self.socket = self._stack.enter_context(
            connect(
                url.replace("http://", "ws://") + "/_stcore/stream",
                subprotocols=["streamlit"],
                max_size=None,
                ping_interval=None,  # a busy server answers pings late: the page views are what is timed
            )
        )
        self.pages: dict[str, str] = {}  # url path -> page script hash, from the navigation message

    def view(self, page_hash: str = "") -> float:
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        request = BackMsg()
        request.rerun_script.page_script_hash = page_hash
        request.rerun_script.widget_states.SetInParent()
        started = time.perf_counter()
        self.socket.send(request.SerializeToString())
        failures: list[str] = []
        while True:
            message = ForwardMsg()
            message.ParseFromString(self.socket.recv(timeout=600))
            kind = message.WhichOneof("type")
            if kind == "navigation":
                self.pages = {p.url_pathname: p.page_script_hash for p in message.navigation.app_pages}
            elif kind == "delta" and message.delta.WhichOneof("type") == "new_element":
                element = message.delta.new_element
                if element.WhichOneof("type") == "exception":
                    failures.append(element.exception.message)
                elif element.WhichOneof("type") == "alert" and element.alert.format == element.alert.ERROR:
                    failures.append(element.alert.body)
            elif kind == "script_finished":
                elapsed = time.perf_counter() - started
                if failures or message.script_finished != ForwardMsg.FINISHED_SUCCESSFULLY:
                    raise SystemExit(f"dashboard page {page_hash or '(default)'} failed: {failures}")
                return elapsed

    def close(self) -> None:
        self._stack.close()


def _viewers_at_once(url: str, pages: dict[str, str], viewers: int) -> list[dict[str, float]]:
    """`viewers` sessions started together, each viewing every page once, viewer i starting at the i-th page
    (so that different pages run at once, as they would): the seconds of each page view of each viewer."""
    order = list(pages)
    start = threading.Barrier(viewers)

    def viewer(index: int) -> dict[str, float]:
        session = DashboardSession(url)
        try:
            start.wait()
            rotated = order[index % len(order) :] + order[: index % len(order)]
            return {page: round(session.view(pages[page]), 3) for page in rotated}
        finally:
            session.close()

    with ThreadPoolExecutor(viewers) as pool:
        return list(pool.map(viewer, range(viewers)))


# Streamlit runs a full garbage collection after every script run unless told not to: measured both ways.
NO_POST_RUN_GC = ("--runner.postScriptGC", "false")
# Seconds between the warm-up's rounds in the passes that measure it: short, so a round follows a change soon.
BENCH_WARMUP_S = 1.0


def remeter_day(ws: Workspace, day: date) -> int:
    """A day re-metered as the pipeline replaces it: each mart file of the day written anew and renamed over
    the old one (the same rows: a new version of every table, as after the nightly run). Returns the files."""
    from gpumeter.storage.files import atomic_write_bytes

    files = sorted((ws.warehouse / "marts").glob(f"*/cluster=*/day={day.isoformat()}/data.parquet"))
    for path in files:
        atomic_write_bytes(path, path.read_bytes())
    return len(files)


def step_dashboard_viewers(ws: Workspace, viewers: int) -> Measure:
    """Every page of the app viewed by `viewers` viewers at once through the real server (`streamlit run`,
    one process, as deployed). wall_s is the slowest page view of any viewer, the server's cache cold at the
    start; extra has each viewer's slowest page, and beside it, measured in the same run: one viewer alone
    (cold), the same viewers again (cache warm), the same two passes with Streamlit's garbage collection
    after every script run turned off (`gc_off`) and then right after a day is re-metered, the viewers at
    once with the cache off, and with the warm-up on: right after the start, and after a re-metered day
    once a round has read it. Each server is started afresh and makes one page view (the default page)
    before the viewers come: its imports (and the warm-up's start)."""
    logs = ws.root / "dashboard-logs"
    logs.mkdir(exist_ok=True)

    def warmed(url: str) -> dict[str, str]:
        session = DashboardSession(url)
        try:
            session.view()
            # The default page is served at "/" (url path ""): named by its page file, like the others.
            return {(path or "charges").replace("-", "_"): key for path, key in session.pages.items()}
        finally:
            session.close()

    results: dict[str, Any] = {"viewers": viewers}
    with dashboard_server(ws, logs / "alone.log") as url:
        pages = warmed(url)
        results["alone"] = _viewers_at_once(url, pages, 1)[0]
    passes: dict[str, list[dict[str, float]]] = {}
    with dashboard_server(ws, logs / "cached.log") as url:
        pages = warmed(url)
        passes["cold"] = _viewers_at_once(url, pages, viewers)
        passes["warm"] = _viewers_at_once(url, pages, viewers)
    results["server_peak_rss_mib"] = round(dashboard_server.peak_rss_mib, 1)  # type: ignore[attr-defined]
    with dashboard_server(ws, logs / "gc-off.log", flags=NO_POST_RUN_GC) as url:
        pages = warmed(url)
        passes["cold_gc_off"] = _viewers_at_once(url, pages, viewers)
        passes["warm_gc_off"] = _viewers_at_once(url, pages, viewers)
        # The nightly run replaced a day: without the warm-up the first viewers read the new files.
        remeter_day(ws, ws.day_list[-1])
        passes["re_metered_gc_off"] = _viewers_at_once(url, pages, viewers)
    # With the warm-up: viewers right after the start (its first round still reading), then after a day is
    # re-metered, once a round has had the time to read it (twice one viewer's cold views of every page).
    settle = max(5.0, 2 * sum(results["alone"].values()))
    results["warm_up_settle_s"] = round(settle, 1)
    with dashboard_server(ws, logs / "warm-up.log", flags=NO_POST_RUN_GC, warmup_s=BENCH_WARMUP_S) as url:
        pages = warmed(url)
        passes["cold_warm_up_gc_off"] = _viewers_at_once(url, pages, viewers)
        remeter_day(ws, ws.day_list[-1])
        time.sleep(settle)
        passes["re_metered_warmed_up_gc_off"] = _viewers_at_once(url, pages, viewers)
    with dashboard_server(ws, logs / "uncached.log", cache_mb=0) as url:
        pages = warmed(url)
        passes["uncached"] = _viewers_at_once(url, pages, viewers)
    for name, runs in passes.items():
        results[name] = runs
        results[f"{name}_slowest_per_viewer"] = [max(run.values()) for run in runs]
    marts = _rows(sorted((ws.warehouse / "marts").glob("*/cluster=*/day=*/data.parquet")))
    return Measure(
        "dashboard_viewers", ws.gpus, max(results["cold_slowest_per_viewer"]), marts, extra=results
    )


def replicate_month(day_ws: Workspace, month_ws: Workspace, clusters: int = 1) -> int:
    """A month of the fleet's marts for the dashboard and the roll-up at fleet size (not measured): the
    metered day's marts stored again for each day of the month, its dates and times moved by whole days.
    The marts have the size and shape of a metered month of that fleet (metering 30 days of 10,000 GPUs
    would take hours here); their figures repeat one day's. With `clusters` > 1 the day is stored again as
    that many clusters (`fleet-01`, ...; the month's config lists them): a fleet that many times the
    metered one, where metering a day of it would not fit the machine's time. Returns the mart rows
    written."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    write_config(month_ws)
    names = [CLUSTER] if clusters == 1 else [f"{CLUSTER}-{k + 1:02d}" for k in range(clusters)]
    if clusters > 1:
        _config_clusters(month_ws.config_path, names)
    source = day_ws.warehouse / "marts"
    rows = 0
    for path in sorted(source.glob(f"*/cluster={CLUSTER}/day=*/data.parquet")):
        metered = pq.read_table(path, partitioning=None)
        for name in names:
            table = metered
            if name != CLUSTER:
                at = table.schema.get_field_index("cluster")
                table = table.set_column(at, "cluster", pa.array([name] * table.num_rows, pa.string()))
            for offset in range(month_ws.days):
                shift = timedelta(days=offset)
                columns = []
                for field_, column in zip(table.schema, table.columns, strict=True):
                    if pa.types.is_date(field_.type):
                        column = pc.add(column.cast(pa.int32()), pa.scalar(offset, pa.int32())).cast(
                            field_.type
                        )
                    elif pa.types.is_timestamp(field_.type):
                        column = pc.add(column, pa.scalar(shift).cast(pa.duration(field_.type.unit)))
                    elif pa.types.is_integer(field_.type) and field_.name.endswith("_ms"):
                        column = pc.add(column, pa.scalar(int(shift.total_seconds() * 1000), field_.type))
                    columns.append(column)
                day = day_ws.start + shift
                target = month_ws.warehouse / "marts" / path.parts[-4] / f"cluster={name}" / f"day={day}"
                target.mkdir(parents=True, exist_ok=True)
                pq.write_table(
                    pa.table(columns, schema=table.schema), target / "data.parquet", compression="zstd"
                )
                rows += table.num_rows
    return rows


def _config_clusters(config_path: Path, names: list[str]) -> None:
    """The config's clusters renamed to `names` (each with the first cluster's source)."""
    import yaml

    doc = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    doc["clusters"] = [{**doc["clusters"][0], "name": name} for name in names]
    config_path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


# --- Prometheus (d), (e) ------------------------------------------------------------------------


def prometheus_tsdb(ws: Workspace) -> Path:
    """The fleet's days as OpenMetrics, backfilled with promtool (not measured: ~1 min per 36 GPU-days)."""
    from gpumeter_sim import fleet_spec, write_openmetrics
    from gpumeter_sim.promserver import backfill

    tsdb = ws.root / "prometheus-tsdb"
    if not (ws.root / "prometheus-tsdb.done").exists():
        openmetrics = ws.root / "fleet.om"
        write_openmetrics(fleet_spec(ws.gpus, CLUSTER, ws.days), openmetrics)
        backfill(openmetrics, tsdb, timeout=3600)
        openmetrics.unlink()
        (ws.root / "prometheus-tsdb.done").write_text("ok\n", encoding="utf-8")
    return tsdb


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=600) as response:
        return response.read()


def step_promql(ws: Workspace, url: str, day: date) -> Measure:
    """(d): GPU-hours × price per namespace with PromQL only: count_over_time per series, summed."""
    from gpumeter.ingest.contract import day_bounds_ms
    from gpumeter.ingest.schema import DCGM_GR_ENGINE_ACTIVE

    prices = _prices(ws.config_path)
    _, end_ms = day_bounds_ms(day)
    # A MIG instance is counted as a whole GPU here: PromQL has no weight table (a gap of this approach).
    query = f'sum by (namespace, modelName) (count_over_time({DCGM_GR_ENGINE_ACTIVE}{{pod!=""}}[1d]))'
    started = time.perf_counter()
    body = json.loads(
        _get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": end_ms / 1000}))
    )
    cost: dict[str, float] = {}
    for item in body["data"]["result"]:
        labels, samples = item["metric"], float(item["value"][1])
        cost[labels.get("namespace", "")] = cost.get(
            labels.get("namespace", ""), 0.0
        ) + samples * 30 / 3600 * prices.get(labels.get("modelName", ""), 0.0)
    wall = time.perf_counter() - started
    return Measure("promql", ws.gpus, wall, 0, extra={"namespaces": len(cost), "cost": sum(cost.values())})


@contextmanager
def recording_proxy(upstream: str, log: list[str]) -> Iterator[str]:
    """A pass-through HTTP proxy on 127.0.0.1 recording every request path (to replay them bare)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            return None

        def _forward(self, body: bytes | None) -> None:
            request = urllib.request.Request(upstream + self.path, data=body, method=self.command)
            for name in ("Content-Type", "Accept", "Authorization"):
                if self.headers.get(name):
                    request.add_header(name, self.headers[name])
            log.append(
                json.dumps({"method": self.command, "path": self.path, "body": (body or b"").decode()})
            )
            try:
                with urllib.request.urlopen(request, timeout=600) as response:
                    status, payload, kind = response.status, response.read(), response.headers["Content-Type"]
            except urllib.error.HTTPError as exc:
                status, payload, kind = exc.code, exc.read(), exc.headers["Content-Type"]
            self.send_response(status)
            self.send_header("Content-Type", kind or "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._forward(None)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self._forward(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _prometheus_source(url: str, encoding: str = "gzip") -> Any:
    from gpumeter.config import PrometheusSource
    from gpumeter.ingest.prometheus import PrometheusRawSource

    return PrometheusRawSource(
        PrometheusSource(kind="prometheus", url=url, encoding=encoding), cluster=CLUSTER
    )


def _pull_day(
    ws: Workspace, url: str, day: date, into: Path, encoding: str = "gzip"
) -> tuple[Any, dict[str, int]]:
    """gpumeter's pull of `day` as the `raw_samples` asset runs it: the source hands the day over one dedupe
    bucket (an hour) at a time and each part is staged into a warehouse's raw zone (`pull_raw_day`)."""
    from gpumeter.config import load_config
    from gpumeter.ingest.pull import pull_raw_day
    from gpumeter.storage.warehouse import Warehouse

    source = _prometheus_source(url, encoding)
    shutil.rmtree(into, ignore_errors=True)
    try:
        counts = pull_raw_day(
            load_config(ws.config_path),
            Warehouse.at(into),
            day,
            source_for=lambda _: source,
            clusters=[CLUSTER],
        )
    finally:
        shutil.rmtree(into, ignore_errors=True)
    return source, counts


def step_prom_pull(ws: Workspace, url: str, day: date, encoding: str) -> Measure:
    started = time.perf_counter()
    source, counts = _pull_day(ws, url, day, ws.root / "pulled", encoding)
    wall = time.perf_counter() - started
    return Measure(
        "prom_pull",
        ws.gpus,
        wall,
        counts["raw_dcgm_samples"] + counts["raw_kube_samples"],
        extra={
            "queries": source.queries,
            "bytes": source.bytes_received,
            "wire_bytes": source.wire_bytes,
            "encoding": encoding,
        },
    )


def record_prom_requests(ws: Workspace, url: str, day: date) -> Path:
    """The HTTP requests of gpumeter's pull of `day`, recorded once through the proxy (not timed)."""
    log: list[str] = []
    with recording_proxy(url, log) as proxy_url:
        _pull_day(ws, proxy_url, day, ws.root / "pulled")
    path = ws.root / "prom-requests.jsonl"
    path.write_text("\n".join(log) + "\n", encoding="utf-8")
    return path


def step_bare_http(ws: Workspace, url: str, requests_file: Path, concurrency: int, encoding: str) -> Measure:
    """The pull's requests with its `Accept-Encoding`: each body read whole and, if gzipped, decompressed
    (the pull has to do as much before it can parse), nothing parsed."""
    from bench import remote_read

    requests = remote_read.recorded_requests(iter(requests_file.read_text(encoding="utf-8").splitlines()))

    def fetch(item: remote_read.RecordedRequest) -> tuple[int, int]:
        wire, body = remote_read.fetch_json(url, item, encoding)
        return wire, len(body)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        sizes = list(pool.map(fetch, requests))
    wall = time.perf_counter() - started
    extra = {
        "requests": len(requests),
        "bytes": sum(body for _, body in sizes),
        "wire_bytes": sum(wire for wire, _ in sizes),
        "encoding": encoding,
    }
    return Measure("bare_http", ws.gpus, wall, 0, extra=extra)


# --- the driver ---------------------------------------------------------------------------------


def run_child(step: str, ws: Workspace, *extra: str) -> Measure:
    """Run one step in a child process; its peak RSS is the child's own VmHWM, its CPU time from wait4."""
    result_file = ws.root / f".{step}.json"
    cmd = [sys.executable, "-m", "bench.fleet", "step", step, "--work", str(ws.root), "--gpus", str(ws.gpus),
           "--days", str(ws.days), "--result", str(result_file), *extra]  # fmt: skip
    process = subprocess.Popen(cmd, cwd=REPO)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"bench step {step} failed (exit {process.returncode}): {' '.join(cmd)}")
    measure = Measure(**json.loads(result_file.read_text(encoding="utf-8")))
    # The child's own VmHWM: wait4's ru_maxrss also keeps the high-water mark of the image the child was
    # before exec, i.e. the parent's (Linux), which made small steps report the parent's size.
    measure.peak_rss_mib = measure.peak_rss_mib or usage.ru_maxrss / 1024
    measure.cpu_s = usage.ru_utime + usage.ru_stime
    return measure


def machine() -> dict[str, Any]:
    import dagster
    import duckdb
    import pyarrow

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kib = int(
        next(
            line.split()[1]
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    )
    prometheus = ""
    try:
        prometheus = subprocess.run(
            ["prometheus", "--version"], capture_output=True, text=True, check=False
        ).stdout.splitlines()[0]
    except (OSError, IndexError):
        prometheus = "not installed"
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": round(mem_kib / 1024**2, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "pyarrow": pyarrow.__version__,
        "dagster": dagster.__version__,
        "prometheus": prometheus,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work)
    report: dict[str, Any] = {"machine": machine(), "args": vars(args) | {"func": None}, "measures": []}
    say: Callable[[str], None] = lambda text: print(f"[bench] {text}", flush=True)  # noqa: E731
    measures: list[Measure] = report["measures"]

    def measure(step: str, ws: Workspace, *extra: str) -> Measure:
        kept = ws.root / ".generate.done.json"
        if step == "generate" and args.reuse and kept.exists():  # raw files of an earlier run, same spec
            m = Measure(**json.loads(kept.read_text(encoding="utf-8")))
            m.extra["reused"] = True
            say(f"generate {ws.gpus} GPUs: reusing the raw files of {kept}")
        else:
            say(f"{step} {ws.gpus} GPUs {' '.join(extra)}")
            m = run_child(step, ws, *extra)
            say(f"  {m.wall_s:.2f} s, {m.cpu_s:.1f} CPU s, {m.peak_rss_mib:.0f} MiB, {m.samples:,} samples")
            if step == "generate":
                kept.write_text(json.dumps(asdict(m)), encoding="utf-8")
        measures.append(m)
        return m

    # The fleet's day: (a), (b) and (b′) side by side.
    fleet = Workspace(work / f"fleet-{args.gpus}", args.gpus, 1)
    measure("generate", fleet)
    measure("kube_spans", fleet)  # the raw day as the pull stores it
    for _ in range(args.repeat):
        measure("single_pass", fleet, "--day", fleet.start.isoformat())
        measure("sample_floor", fleet, "--day", fleet.start.isoformat())
        measure("meter", fleet, "--day", fleet.start.isoformat())
    if args.fleet_month_days:
        # The dashboard and the roll-up over a month of the fleet (marts of the metered day, re-dated).
        month_gpus = args.gpus * args.fleet_month_clusters
        fleet_month = Workspace(work / f"fleet-month-{month_gpus}", month_gpus, args.fleet_month_days)
        shutil.rmtree(fleet_month.warehouse, ignore_errors=True)
        rows = replicate_month(fleet, fleet_month, args.fleet_month_clusters)
        say(
            f"{month_gpus} GPUs x {args.fleet_month_days} days of marts: {rows:,} rows (the metered day re-dated"
            + (f", stored as {args.fleet_month_clusters} clusters)" if args.fleet_month_clusters > 1 else ")")
        )
        for step in ("rollup", "dashboard"):
            measure(step, fleet_month).extra["replicated_month"] = True  # told apart in the report
        if args.viewers:
            measure("dashboard_viewers", fleet_month, "--viewers", str(args.viewers)).extra[
                "replicated_month"
            ] = True
    # A month: every day metered on its own (partitions are independent), then the invoice roll-up.
    if args.month_gpus:
        month = Workspace(work / f"month-{args.month_gpus}", args.month_gpus, args.month_days)
        measure("generate", month)
        measure("kube_spans", month)
        for day in month.day_list:
            measure("meter", month, "--day", day.isoformat())
        measure("rollup", month)
        measure("dashboard", month)
        if args.viewers:
            measure("dashboard_viewers", month, "--viewers", str(args.viewers))
    if args.prom_gpus:
        from gpumeter_sim.promserver import PrometheusServer, binaries_available

        if not binaries_available():
            say("prometheus/promtool not installed: (d), (e) skipped")
        else:
            prom = Workspace(work / f"prom-{args.prom_gpus}", args.prom_gpus, 1)
            write_config(prom)
            say(f"backfilling {args.prom_gpus} GPUs x 1 day into Prometheus (not measured)")
            started = time.perf_counter()
            tsdb = prometheus_tsdb(prom)
            report["prometheus_backfill_s"] = round(time.perf_counter() - started, 1)
            with PrometheusServer(tsdb) as server:
                day = prom.start.isoformat()
                pid = server.process.pid if server.process else 0
                # Recorded in a child: the parent stays small (it forks every step).
                run_child("record", prom, "--day", day, "--url", server.url)
                requests_file = prom.root / "prom-requests.jsonl"

                def on_prometheus(step: str, *extra: str) -> Measure:
                    """A step with the CPU seconds Prometheus spent meanwhile (the load put on its server)."""
                    before = _cpu_s(pid)
                    m = measure(step, prom, "--url", server.url, *extra)
                    m.extra["prometheus_cpu_s"] = round(_cpu_s(pid) - before, 2)
                    return m

                for _ in range(args.repeat):
                    on_prometheus("promql", "--day", day)
                    for encoding in args.prom_encodings.split(","):
                        # Side by side: the pull, then the bare fetch of its requests in its encoding.
                        on_prometheus("prom_pull", "--day", day, "--encoding", encoding)
                        on_prometheus("bare_http", "--requests", str(requests_file), "--encoding", encoding)
                report["prometheus_peak_rss_mib"] = _vm_hwm_mib(server.process.pid if server.process else 0)
    return report


def _cpu_s(pid: int) -> float:
    """utime + stime of a process so far (/proc/<pid>/stat), in seconds; 0 where it is not known."""
    stat = Path(f"/proc/{pid}/stat")
    if not pid or not stat.exists():
        return 0.0
    fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _vm_hwm_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status")
    if not pid or not status.exists():
        return 0.0
    line = next((x for x in status.read_text().splitlines() if x.startswith("VmHWM")), "VmHWM: 0 kB")
    return int(line.split()[1]) / 1024


def child(args: argparse.Namespace) -> None:
    ws = Workspace(Path(args.work), args.gpus, args.days)
    day = date.fromisoformat(args.day) if args.day else ws.start
    steps: dict[str, Callable[[], Measure]] = {
        "generate": lambda: step_generate(ws),
        "kube_spans": lambda: step_kube_spans(ws),
        "meter": lambda: step_meter(ws, day),
        "single_pass": lambda: step_single_pass(ws, day),
        "sample_floor": lambda: step_sample_floor(ws, day),
        "rollup": lambda: step_rollup(ws),
        "dashboard": lambda: step_dashboard(ws),
        "dashboard_viewers": lambda: step_dashboard_viewers(ws, args.viewers),
        "promql": lambda: step_promql(ws, args.url, day),
        "prom_pull": lambda: step_prom_pull(ws, args.url, day, args.encoding),
        "bare_http": lambda: step_bare_http(ws, args.url, Path(args.requests), 4, args.encoding),
        "record": lambda: Measure(
            "record", ws.gpus, 0.0, len(record_prom_requests(ws, args.url, day).read_text().splitlines())
        ),
    }
    measure = steps[args.step]()
    measure.peak_rss_mib = _vm_hwm_mib(os.getpid())  # this process image's own peak (see run_child)
    Path(args.result).write_text(json.dumps(asdict(measure)), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(required=True)
    r = sub.add_parser("run", help="the whole benchmark; writes <out>/<stamp>.json")
    r.add_argument("--work", required=True, help="scratch directory (needs ~15 GB for 10,000 GPUs x 1 day)")
    r.add_argument("--out", default=str(REPO / "bench" / "results"))
    r.add_argument("--gpus", type=int, default=10_000)
    r.add_argument(
        "--month-gpus", type=int, default=1_000, help="fleet metered day by day for a month; 0 skips"
    )
    r.add_argument("--month-days", type=int, default=30)
    r.add_argument(
        "--fleet-month-days",
        type=int,
        default=30,
        help="days of the fleet's metered marts, re-dated, under the dashboard and roll-up; 0 skips",
    )
    r.add_argument(
        "--fleet-month-clusters",
        type=int,
        default=1,
        help="store the metered day as this many clusters in that month (a fleet this many times --gpus)",
    )
    r.add_argument("--prom-gpus", type=int, default=200, help="fleet backfilled into Prometheus; 0 skips")
    r.add_argument(
        "--viewers",
        type=int,
        default=0,
        help="concurrent dashboard viewers through the real server, after each `dashboard` step; 0 skips",
    )
    r.add_argument(
        "--prom-encodings",
        default="gzip",
        help="comma-separated Accept-Encodings to measure (e) and its bare fetch in: gzip, identity",
    )
    r.add_argument("--repeat", type=int, default=1)
    r.add_argument(
        "--reuse", action="store_true", help="keep a workspace's generated raw files from an earlier run"
    )
    r.set_defaults(func=lambda a: _write_report(run(a), Path(a.out)))
    s = sub.add_parser("step", help="one measured step (run by `run` in a child process)")
    s.add_argument("step")
    s.add_argument("--work", required=True)
    s.add_argument("--gpus", type=int, required=True)
    s.add_argument("--days", type=int, default=1)
    s.add_argument("--day")
    s.add_argument("--url")
    s.add_argument("--requests")
    s.add_argument("--encoding", default="gzip", choices=["gzip", "identity"])
    s.add_argument("--viewers", type=int, default=10)
    s.add_argument("--result", required=True)
    s.set_defaults(func=child)
    args = parser.parse_args(argv)
    args.func(args)
    return 0


def _write_report(report: dict[str, Any], out: Path) -> None:
    from bench.report import markdown

    out.mkdir(parents=True, exist_ok=True)
    stamp = report["machine"]["date"].replace(":", "").replace("-", "")
    report["measures"] = [asdict(m) | {"samples_per_s": m.samples_per_s} for m in report["measures"]]
    (out / f"{stamp}.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    text = markdown(report)
    (out / f"{stamp}.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    raise SystemExit(main())
