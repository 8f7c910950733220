"""tests/scrape_paths.py against a REAL Prometheus: what each scrape path makes of a dcgm-exporter's labels.

A local `http.server` serves a hand-written exposition in dcgm-exporter's format (plus two kube-state-metrics
series). Real `prometheus` processes scrape it, one job per path, with the target labels each path's
`ScrapePath.target_labels` names set by relabelling (prometheus-operator's generated config sets the same
target labels from `__meta_kubernetes_*`; here `replacement`/`target_label` rules set them, `job` and
`instance` included) and the path's `honor_labels`:

- server A scrapes the static, ServiceMonitor and PodMonitor paths (honorLabels false and true);
- server B (with `external_labels`) scrapes the ServiceMonitor path that is federated and read back;
- server C federates B's `/federate` (`match[]={job=~".+"}`) twice: `honor_labels: true` and `false`;
- server D reads B through `remote_read`, which adds B's external labels as a Thanos sidecar does.

Every series each server holds (of the exposed families and `up`) must be exactly the label sets
`ScrapePath.scraped` and `ScrapePath.up` predict, no more and no fewer. A second, server-free test checks the
product's reading of those shapes (ScrapeTargets.holder, SeriesMapping.kube_labels) on every path.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_fixtures import needs_prometheus
from scrape_paths import ScrapePath, attach, dcgm_exporter_paths

from gpumeter.ingest.prometheus.raw_tables import SeriesMapping
from gpumeter.ingest.prometheus.targets import HolderReading, ScrapeTargets
from gpumeter_sim import promserver

NODE, EXPORTER_POD, EXPORTER_IP = "node-1", "nvidia-dcgm-exporter-7xk2p", "10.42.1.17"
DRIVER = "550.54.15"
H100 = "NVIDIA H100 80GB HBM3"


def _gpu(gpu: str, uuid: str, bus: str, hostname: str = "Hostname") -> dict[str, str]:
    return {
        "gpu": gpu,
        "UUID": uuid,
        "pci_bus_id": bus,
        "device": f"nvidia{gpu}",
        "modelName": H100,
        hostname: NODE,
        "DCGM_FI_DRIVER_VERSION": DRIVER,
    }


HELD = {"container": "main", "namespace": "training", "pod": "train-0"}
# What the exporter exposes, in dcgm-exporter's format (`__name__` first, then its labels in its order), and
# the value of each series.
HELD_GPU = {"__name__": "DCGM_FI_DEV_GPU_UTIL", **_gpu("0", "GPU-a", "00000000:07:00.0"), **HELD}
FREE_GPU = {"__name__": "DCGM_FI_DEV_GPU_UTIL", **_gpu("1", "GPU-b", "00000000:08:00.0")}
XID = {
    "__name__": "DCGM_FI_DEV_XID_ERRORS",
    **_gpu("0", "GPU-a", "00000000:07:00.0"),
    **HELD,
    "err_code": "0",
    "err_msg": "No Error",
}
MIG = {
    "__name__": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    **_gpu("2", "GPU-c", "00000000:0A:00.0"),
    "GPU_I_PROFILE": "3g.40gb",
    "GPU_I_ID": "1",
    "container": "server",
    "namespace": "inference",
    "pod": "serve-0",
}
# dcgm-exporter 4.x spells the node label `hostname`.
HOSTNAME_4X = {"__name__": "DCGM_FI_DEV_FB_USED", **_gpu("1", "GPU-b", "00000000:08:00.0", "hostname")}
NODE_CAPACITY = {
    "__name__": "kube_node_status_capacity",
    "node": NODE,
    "resource": "nvidia_com_gpu",
    "unit": "integer",
}
POD_LABELS = {
    "__name__": "kube_pod_labels",
    "namespace": "training",
    "pod": "train-0",
    "uid": "u1",
    "label_team": "ml",
}
EXPOSED: list[tuple[dict[str, str], str]] = [
    (HELD_GPU, "87"),
    (FREE_GPU, "0"),
    (XID, "0"),
    (MIG, "0.423"),
    (HOSTNAME_4X, "1024"),
    (NODE_CAPACITY, "8"),
    (POD_LABELS, "1"),
]
HELP = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered.",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "kube_node_status_capacity": "The capacity for different resources of a node.",
    "kube_pod_labels": "Kubernetes labels converted to Prometheus labels.",
}
# The families read back from each server: the exposed ones and `up`.
READ_BACK = '{__name__=~"DCGM_FI_.*|kube_.*|up"}'


def exposition() -> bytes:
    """The Prometheus text format (0.0.4) of EXPOSED, one HELP/TYPE block per family."""
    lines: list[str] = []
    seen: set[str] = set()
    for labels, value in EXPOSED:
        name = labels["__name__"]
        if name not in seen:
            seen.add(name)
            lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge"]
        body = ",".join(f'{k}="{v}"' for k, v in labels.items() if k != "__name__")
        lines.append(f"{name}{{{body}}} {value}")
    return ("\n".join(lines) + "\n").encode()


# --- the paths, as the servers below scrape them ---------------------------------------------------------

MODEL = {p.name: p for p in dcgm_exporter_paths(NODE, EXPORTER_POD, EXPORTER_IP)}


def _with_job(path: ScrapePath, job: str) -> ScrapePath:
    return replace(path, target_labels={**path.target_labels, "job": job})


# Server A: each path a job of its own (dcgm_exporter_paths gives the honorLabels true and false variants the
# same job, which would make them one series in one server).
LOCAL_PATHS = [
    MODEL["static"],
    MODEL["servicemonitor"],
    _with_job(MODEL["servicemonitor-honor"], "nvidia-dcgm-exporter-honor"),
    MODEL["podmonitor"],
    _with_job(MODEL["podmonitor-honor"], "gpu-operator/nvidia-dcgm-exporter-honor"),
]
# Server C: the two federating jobs of one source, told apart by their job.
FEDERATED_PATHS = [
    MODEL["federated"],
    replace(
        MODEL["federated-renamed"],
        federation_target={**MODEL["federated-renamed"].federation_target, "job": "federate-renamed"},
    ),
]
THANOS_PATH = MODEL["thanos"]
# Server B: the one source the federated and Thanos-like paths read, as B itself holds it.
SOURCE_PATH = ScrapePath("source", MODEL["federated"].target_labels, MODEL["federated"].honor_labels)
SOURCE_PATH_EXTERNAL = MODEL["federated"].external_labels


def test_the_paths_cover_the_model() -> None:
    covered = [p.name for p in (*LOCAL_PATHS, *FEDERATED_PATHS, THANOS_PATH)]
    assert sorted(covered) == sorted(MODEL)
    for p in (*FEDERATED_PATHS, THANOS_PATH):  # one source B serves them all
        assert (p.target_labels, p.honor_labels, p.external_labels) == (
            SOURCE_PATH.target_labels,
            SOURCE_PATH.honor_labels,
            SOURCE_PATH_EXTERNAL,
        )


def expected_series(paths: list[ScrapePath]) -> set[frozenset[tuple[str, str]]]:
    out = set()
    for path in paths:
        out |= {frozenset(path.scraped(labels).items()) for labels, _ in EXPOSED}
        out.add(frozenset(path.up().items()))
    return out


# --- real servers ------------------------------------------------------------------------------------------


@pytest.fixture
def exporter() -> Iterator[str]:
    """A dcgm-exporter (and kube-state-metrics) endpoint on 127.0.0.1: `host:port`, serving /metrics."""
    body = exposition()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            return None

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if urllib.parse.urlparse(self.path).path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class ConfiguredPrometheus(promserver.PrometheusServer):
    """`prometheus` on 127.0.0.1 at a free port, as PrometheusServer starts, waits for and stops it, with a
    configuration of the test's (JSON, which is YAML)."""

    def __init__(self, data_dir: Path, config: Mapping[str, Any]) -> None:
        super().__init__(data_dir, startup_timeout=20.0, stop_timeout=5.0)
        self.config = config

    def _command(self, binary: str, work: Path, port: int) -> list[str]:
        config = work / "prometheus.yml"
        config.write_text(json.dumps(self.config, indent=1), encoding="utf-8")
        return [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]


GLOBAL = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}


def scrape_job(
    job_name: str, address: str, target: Mapping[str, str], honor_labels: bool, **extra: Any
) -> dict[str, Any]:
    """A scrape job of one static target whose labels are exactly `target` (relabelled in, as
    prometheus-operator's job sets them from the Kubernetes metadata)."""
    return {
        "job_name": job_name,
        "honor_labels": honor_labels,
        "static_configs": [{"targets": [address]}],
        "relabel_configs": [{"target_label": k, "replacement": v} for k, v in target.items()],
        **extra,
    }


def read_series(server: promserver.PrometheusServer) -> set[frozenset[tuple[str, str]]]:
    now = time.time()
    query = urllib.parse.urlencode(
        {"match[]": READ_BACK, "start": f"{now - 300:.3f}", "end": f"{now + 60:.3f}"}
    )
    with urllib.request.urlopen(f"{server.url}/api/v1/series?{query}", timeout=5) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return {frozenset(labels.items()) for labels in answer["data"]}


def _show(series: set[frozenset[tuple[str, str]]]) -> list[dict[str, str]]:
    return sorted((dict(sorted(s)) for s in series), key=lambda d: json.dumps(d, sort_keys=True))


@needs_prometheus
def test_a_real_prometheus_gives_each_path_the_modelled_labels(exporter: str, tmp_path: Path) -> None:
    a_config = {
        "global": GLOBAL,
        "scrape_configs": [
            scrape_job(p.name, exporter, p.target_labels, p.honor_labels) for p in LOCAL_PATHS
        ],
    }
    b_config = {
        "global": {**GLOBAL, "external_labels": dict(SOURCE_PATH_EXTERNAL)},
        "scrape_configs": [
            scrape_job(SOURCE_PATH.name, exporter, SOURCE_PATH.target_labels, SOURCE_PATH.honor_labels)
        ],
    }
    servers: list[promserver.PrometheusServer] = []
    try:
        a = ConfiguredPrometheus(tmp_path / "a", a_config)
        servers.append(a)
        a.start()
        b = ConfiguredPrometheus(tmp_path / "b", b_config)
        servers.append(b)
        b.start()
        source = b.url.removeprefix("http://")
        c_config = {
            "global": GLOBAL,
            "scrape_configs": [
                scrape_job(
                    p.name,
                    source,
                    p.federation_target,
                    p.federation_honor_labels,
                    metrics_path="/federate",
                    params={"match[]": ['{job=~".+"}']},
                )
                for p in FEDERATED_PATHS
            ],
        }
        c = ConfiguredPrometheus(tmp_path / "c", c_config)
        servers.append(c)
        c.start()
        d_config = {"global": GLOBAL, "remote_read": [{"url": f"{b.url}/api/v1/read", "read_recent": True}]}
        d = ConfiguredPrometheus(tmp_path / "d", d_config)
        servers.append(d)
        d.start()

        # The federating server's own `up` for each federating target.
        federators_up = {
            frozenset(attach({"__name__": "up"}, p.federation_target, False).items()) for p in FEDERATED_PATHS
        }
        expected = {
            "A (static, ServiceMonitor, PodMonitor)": (a, expected_series(LOCAL_PATHS)),
            "B (the federated source, read directly)": (b, expected_series([SOURCE_PATH])),
            "C (federating B)": (c, expected_series(FEDERATED_PATHS) | federators_up),
            "D (remote-reading B, Thanos-like)": (d, expected_series([THANOS_PATH])),
        }
        actual: dict[str, set[frozenset[tuple[str, str]]]] = {}
        deadline = time.monotonic() + 20
        while True:
            actual = {name: read_series(server) for name, (server, _) in expected.items()}
            if (
                all(actual[name] == want for name, (_, want) in expected.items())
                or time.monotonic() > deadline
            ):
                break
            time.sleep(0.25)
        for name, (server, want) in expected.items():
            got = actual[name]
            assert got == want, (
                f"{name}: series the model predicts that the server lacks: {_show(want - got)}; "
                f"series the server holds that the model does not predict: {_show(got - want)}\n"
                f"{server.log_tail()}"
            )
    finally:
        for server in reversed(servers):
            server.stop()


# --- the product's reading of these shapes -----------------------------------------------------------------

PRODUCT_PATHS = [*MODEL.values(), *LOCAL_PATHS, *FEDERATED_PATHS]


@pytest.mark.parametrize("path", PRODUCT_PATHS, ids=[f"{p.name}-{i}" for i, p in enumerate(PRODUCT_PATHS)])
def test_the_product_reads_the_holder_on_every_path(path: ScrapePath) -> None:
    held, free, mig, up = path.scraped(HELD_GPU), path.scraped(FREE_GPU), path.scraped(MIG), path.up()

    targets = ScrapeTargets("cluster")
    targets.learn_up([up])
    assert targets.holder(held)[0] == ("training", "train-0", "main")
    assert targets.holder(mig)[0] == ("inference", "serve-0", "server")
    assert targets.holder(free)[0] == (None, None, None)
    assert targets.holder(path.scraped(HOSTNAME_4X))[0] == (None, None, None)

    # Without `up`, the free GPU's pod labels (the exporter's own pod, where the target attached one) are
    # never read as a holder.
    holder, reading = ScrapeTargets("cluster").holder(free)
    assert reading in (HolderReading.TARGET, HolderReading.UNKNOWN) or holder[1] is None, (holder, reading)


def test_the_product_keeps_kube_series_identity_on_every_path() -> None:
    mapping = SeriesMapping("cluster", ())
    direct = json.loads(mapping.kube_labels(MODEL["static"].scraped(NODE_CAPACITY)))
    assert direct == {"node": NODE, "resource": "nvidia_com_gpu", "unit": "integer"}
    for path in PRODUCT_PATHS:
        # The target's pod labels never reach a node series' identity; a federating or Thanos-like read adds
        # its source's external labels, which every series of that source carries alike.
        capacity = mapping.kube_labels(path.scraped(NODE_CAPACITY))
        assert json.loads(capacity) == {**direct, **path.external_labels}, path.name
        pod_labels = json.loads(mapping.kube_labels(path.scraped(POD_LABELS)))
        assert pod_labels == {
            "namespace": "training",
            "pod": "train-0",
            "uid": "u1",
            "label_team": "ml",
            **path.external_labels,
        }, path.name
