"""A real, local Prometheus for the tests and the demo: backfill a TSDB from OpenMetrics text with
`promtool`, then serve it read-only on 127.0.0.1.

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
from pathlib import Path

INSTALL_HINT = "install the Debian package prometheus (`apt-get install -y prometheus`), which ships both"


class PrometheusNotInstalled(RuntimeError):
    """`prometheus` or `promtool` is not on PATH."""


class PrometheusServerError(RuntimeError):
    """promtool failed, or the server did not become ready."""


def find_binary(name: str) -> str:
    """Absolute path of `prometheus` or `promtool`; a clear error naming the package when missing."""
    path = shutil.which(name)
    if path is None:
        raise PrometheusNotInstalled(f"`{name}` is not on PATH: {INSTALL_HINT} `prometheus` and `promtool`")
    return path


def binaries_available() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


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


_RUNNING: weakref.WeakSet[PrometheusServer] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:  # pragma: no cover - only when a caller forgot the `with`
    for server in list(_RUNNING):
        server.stop()


class PrometheusServer:
    """`prometheus` serving `tsdb_dir` on 127.0.0.1 at a free port, as a context manager.

    `.url` is `http://127.0.0.1:<port>`. Entering waits for `/-/ready`; leaving stops the process
    (SIGTERM, then SIGKILL after `stop_timeout`)."""

    def __init__(
        self,
        tsdb_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.tsdb_dir = Path(tsdb_dir)
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
                "the server is not running; use `with PrometheusServer(dir) as prom:`"
            )
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        binary = find_binary("prometheus")
        self.tsdb_dir.mkdir(parents=True, exist_ok=True)
        self._workdir = tempfile.TemporaryDirectory(prefix="gpumeter-prometheus-")
        work = Path(self._workdir.name)
        config = work / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n", encoding="utf-8")
        self._log_path = work / "prometheus.log"
        fixed_port = self.port is not None
        for attempt in range(5):
            port = self.port if fixed_port else free_port()
            cmd = [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.tsdb_dir}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                *self.extra_args,
            ]
            with open(self._log_path, "ab") as log:
                self.process = subprocess.Popen(
                    cmd,
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
        ready = f"http://127.0.0.1:{self.port}/-/ready"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PrometheusServerError(
                    f"prometheus exited with code {self.process.returncode} before it was ready:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(ready, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.1)
        raise PrometheusServerError(
            f"prometheus on port {self.port} was not ready within {self.startup_timeout:.0f} s:\n{self.log_tail()}"
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
        return f"PrometheusServer({str(self.tsdb_dir)!r}, {state})"


__all__ = [
    "INSTALL_HINT",
    "PrometheusNotInstalled",
    "PrometheusServer",
    "PrometheusServerError",
    "backfill",
    "binaries_available",
    "find_binary",
    "free_port",
]
