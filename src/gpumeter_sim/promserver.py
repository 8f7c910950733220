"""A real, local Prometheus for the tests and the demo: backfill a TSDB from OpenMetrics text with
`promtool`, then serve it read-only on 127.0.0.1. And a real, local VictoriaMetrics for the tests, another
PromQL API the source reads.

    backfill("day.om", "tsdb/")
    with PrometheusServer("tsdb/") as prom:
        PrometheusRawSource(PrometheusSource(url=prom.url), cluster="demo").fetch_day(...)

The server scrapes nothing (`scrape_configs: []`): scraping anything current would move the head block
to now and let retention delete the backfilled blocks (docs/telemetry.md). Retention is 100 years for the same
reason. The process is stopped when the `with` block ends, however it ends, and at interpreter exit as a
last resort; it runs in its own process group so that nothing it starts outlives it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from decimal import Decimal
from pathlib import Path
from typing import Self

INSTALL_HINT = "install the Debian package prometheus (`apt-get install -y prometheus`), which ships both"
VICTORIA_METRICS_INSTALL_HINT = (
    "install the Debian package victoria-metrics (`apt-get install -y victoria-metrics`)"
)


class PrometheusNotInstalled(RuntimeError):
    """`prometheus` or `promtool` is not on PATH."""


class PrometheusServerError(RuntimeError):
    """promtool failed, or the server did not become ready."""


_PROMETHEUS_MISSING = f"{INSTALL_HINT} `prometheus` and `promtool`"


def find_binary(name: str, install_hint: str = _PROMETHEUS_MISSING) -> str:
    """Absolute path of a server binary (`prometheus`, `promtool` by default); a clear error naming the package
    when missing."""
    path = shutil.which(name)
    if path is None:
        raise PrometheusNotInstalled(f"`{name}` is not on PATH: {install_hint}")
    return path


def binaries_available() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


def victoria_metrics_available() -> bool:
    return shutil.which(VictoriaMetricsServer.binary) is not None


def backfill(
    openmetrics_path: str | os.PathLike[str],
    tsdb_dir: str | os.PathLike[str],
    timeout: float = 600,
    max_block_duration: str = "168h",
) -> Path:
    """Write TSDB blocks for an OpenMetrics file (timestamps in seconds, ending with `# EOF`) into
    `tsdb_dir` with `promtool tsdb create-blocks-from openmetrics`. Several files may be backfilled into
    one directory. Returns the directory.

    promtool parses the whole file once per block it writes: with its default 2 h blocks a day is read 12
    times. `max_block_duration` (a Go duration) lets it write blocks of up to that span (it rounds down to 2 h × 3^k: 168h gives
    162 h), so a day is read once or twice (a 16-GPU day: 31.7 s → 7.9 s)."""
    promtool = find_binary("promtool")
    source, target = Path(openmetrics_path), Path(tsdb_dir)
    if not source.is_file():
        raise PrometheusServerError(f"{source}: no such OpenMetrics file to backfill")
    target.mkdir(parents=True, exist_ok=True)
    cmd = [
        promtool,
        "tsdb",
        "create-blocks-from",
        "openmetrics",
        "--quiet",
        f"--max-block-duration={max_block_duration}",
        str(source),
        str(target),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PrometheusServerError(
            f"promtool did not finish backfilling {source} within {timeout:.0f} s"
        ) from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-2000:]
        raise PrometheusServerError(
            f"promtool could not backfill {source} into {target} (exit {done.returncode}): {detail}; "
            "check that timestamps are in seconds, families are contiguous and the file ends with `# EOF`"
        )
    return target


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_RUNNING: weakref.WeakSet[_LocalServer] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:  # pragma: no cover - only when a caller forgot the `with`
    for server in list(_RUNNING):
        server.stop()


class _LocalServer:
    """A server binary on 127.0.0.1 at a free port, as a context manager: `.url` is `http://127.0.0.1:<port>`.
    Entering waits for its readiness path; leaving stops the process (SIGTERM, then SIGKILL after
    `stop_timeout`)."""

    binary = ""
    ready_path = ""
    install_hint = ""  # what to install where `binary` is not on PATH

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.extra_args = tuple(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._log_path: Path | None = None

    @property
    def url(self) -> str:
        if self.port is None or self.process is None:
            raise PrometheusServerError(
                f"the server is not running; use `with {type(self).__name__}(dir) as server:`"
            )
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _command(self, binary: str, work: Path, port: int) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        binary = find_binary(self.binary, self.install_hint)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._workdir = tempfile.TemporaryDirectory(prefix=f"gpumeter-{self.binary}-")
        work = Path(self._workdir.name)
        self._log_path = work / f"{self.binary}.log"
        fixed_port = self.port is not None
        for attempt in range(5):
            port = self.port if fixed_port else free_port()
            assert port is not None
            with open(self._log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [*self._command(binary, work, port), *self.extra_args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            self.port = port
            _RUNNING.add(self)
            try:
                self._wait_ready()
                return
            except PrometheusServerError:
                address_in_use = "address already in use" in self.log_tail().lower()
                self.stop(cleanup=False)
                if fixed_port or not address_in_use or attempt == 4:
                    self._cleanup()
                    raise
                self.port = None

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        ready = f"http://127.0.0.1:{self.port}{self.ready_path}"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PrometheusServerError(
                    f"{self.binary} exited with code {self.process.returncode} before it was ready:\n"
                    f"{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(ready, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.1)
        raise PrometheusServerError(
            f"{self.binary} on port {self.port} was not ready within {self.startup_timeout:.0f} s:\n"
            f"{self.log_tail()}"
        )

    def log_tail(self, chars: int = 3000) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(encoding="utf-8", errors="replace")[-chars:]

    def stop(self, cleanup: bool = True) -> None:
        process, self.process = self.process, None
        _RUNNING.discard(self)
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=self.stop_timeout)
        elif process is not None:
            process.wait()
        if cleanup:
            self._cleanup()

    def _cleanup(self) -> None:
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __repr__(self) -> str:
        state = f"on {self.url}" if self.process is not None else "stopped"
        return f"{type(self).__name__}({str(self.data_dir)!r}, {state})"


class PrometheusServer(_LocalServer):
    """`prometheus` serving `tsdb_dir` (a backfilled TSDB) on 127.0.0.1 at a free port."""

    binary = "prometheus"
    ready_path = "/-/ready"
    install_hint = _PROMETHEUS_MISSING

    @property
    def tsdb_dir(self) -> Path:
        return self.data_dir

    def _command(self, binary: str, work: Path, port: int) -> list[str]:
        config = work / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n", encoding="utf-8")
        return [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.data_dir}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ]


class VictoriaMetricsServer(_LocalServer):
    """`victoria-metrics` (single-node) storing under `data_dir`, on 127.0.0.1 at a free port: another
    PromQL API the source reads (docs/prometheus.md). Samples are written with `import_openmetrics`.

    Retention is 100 years (its default, a month, would drop a test's past days at import); queries see
    samples up to the present (`-search.latencyOffset=0s`) and are never answered from its cache, so that a
    query after an import sees it."""

    binary = "victoria-metrics"
    ready_path = "/health"
    install_hint = VICTORIA_METRICS_INSTALL_HINT

    def _command(self, binary: str, work: Path, port: int) -> list[str]:
        return [
            binary,
            f"-httpListenAddr=127.0.0.1:{port}",
            f"-storageDataPath={self.data_dir}",
            "-retentionPeriod=100y",
            "-search.latencyOffset=0s",
            "-search.disableCache",
            "-loggerLevel=ERROR",
        ]

    def import_openmetrics(self, path: str | os.PathLike[str], lines_per_request: int = 100_000) -> None:
        """Store the samples of an OpenMetrics file (as `backfill` takes it: timestamps in seconds): its
        sample lines with their timestamps in milliseconds, in requests of `lines_per_request` lines."""
        batch: list[str] = []
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                if not line.strip() or line.startswith("#"):
                    continue
                series_and_value, seconds = line.rstrip("\n").rsplit(" ", 1)
                batch.append(f"{series_and_value} {round(Decimal(seconds) * 1000)}")
                if len(batch) == lines_per_request:
                    self.import_samples("\n".join(batch) + "\n", flush=False)
                    batch = []
        self.import_samples("\n".join(batch) + "\n")

    def import_samples(self, text: str, flush: bool = True) -> None:
        """Store samples given in the Prometheus text format, each with its timestamp in milliseconds
        (`/api/v1/import/prometheus`), and make them searchable at once (`/internal/force_flush`)."""
        request = urllib.request.Request(
            f"{self.url}/api/v1/import/prometheus", data=text.encode("utf-8"), method="POST"
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
        if flush:
            with urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=120) as response:
                response.read()


__all__ = [
    "INSTALL_HINT",
    "PrometheusNotInstalled",
    "PrometheusServer",
    "PrometheusServerError",
    "VICTORIA_METRICS_INSTALL_HINT",
    "VictoriaMetricsServer",
    "backfill",
    "binaries_available",
    "victoria_metrics_available",
    "find_binary",
    "free_port",
]
