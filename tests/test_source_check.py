"""`gpumeter source check` against a REAL Prometheus on 127.0.0.1, backfilled with promtool: one TSDB for the
module, one `cluster` label per case, each case's config selecting its own cluster. Every case's series are
built with the label shapes its scrape path gives them (tests/scrape_paths.py): the DCGM series, the `up`
series of its targets, and kube-state-metrics' node and pod series. Nothing is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_fixtures import Sample, needs_prometheus, sample, serve_samples
from scrape_paths import ScrapePath, dcgm_exporter_paths

from gpumeter.cli.main import main
from gpumeter_sim import promserver

pytestmark = needs_prometheus

END = datetime(2026, 11, 1, 10, 10, tzinfo=UTC)
END_MS = int(END.timestamp() * 1000)
WINDOW_MINUTES = 10
START_MS = END_MS - WINDOW_MINUTES * 60_000
EXPORTER_POD = "nvidia-dcgm-exporter-x7k2p"
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
KSM_TARGET = {"job": "kube-state-metrics", "instance": "10.0.9.9:8080"}


def path_named(name: str, node: str) -> ScrapePath:
    return next(p for p in dcgm_exporter_paths(node, EXPORTER_POD, "10.0.0.5") if p.name == name)


def fleet(
    cluster: str,
    path: str,
    *,
    step_s: int = 30,
    with_up: bool = True,
    host: str | None = None,
    team_label: bool = True,
) -> list[Sample]:
    """One node of two GPUs (GPU 0 held by training/train-0, GPU 1 free) scraped through `path` every
    `step_s` seconds over the window, with kube-state-metrics' node and pod series every 30 s."""
    node = f"{cluster}-node-1"
    scrape = path_named(path, node)
    out: list[Sample] = []
    times = range(START_MS - 60_000, END_MS + 60_000, step_s * 1000)  # a minute either side of the window
    for gpu, holder in ((0, {"pod": "train-0", "namespace": "training", "container": "main"}), (1, {})):
        exposed = {
            "gpu": str(gpu),
            "UUID": f"GPU-{cluster}-{gpu}",
            "Hostname": host or node,
            "modelName": "NVIDIA H100 80GB HBM3",
            **holder,
        }
        for metric in METRICS:
            labels = scrape.scraped({"__name__": metric, **exposed}) | {"cluster": cluster}
            labels.pop("__name__")
            out += [sample(metric, labels, 50.0, ts) for ts in times]
    if with_up:
        up = scrape.up() | {"cluster": cluster}
        up.pop("__name__")
        out += [sample("up", up, 1, ts) for ts in times]
    kube_times = range(START_MS - 60_000, END_MS + 60_000, 30_000)
    ksm = KSM_TARGET | {"cluster": cluster}
    pod = {"namespace": "training", "pod": "train-0", "uid": f"uid-{cluster}"}
    kube = [
        ("up", ksm),
        ("kube_node_info", ksm | {"node": node}),
        ("kube_node_status_capacity", ksm | {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"}),
        ("kube_pod_info", ksm | pod | {"node": node}),
        ("kube_pod_labels", ksm | pod | ({"label_team": "research"} if team_label else {})),
    ]
    out += [sample(metric, labels, 1, ts) for metric, labels in kube for ts in kube_times]
    return out


CASES: dict[str, dict[str, object]] = {
    "clean": {"path": "static"},
    "sm": {"path": "servicemonitor"},
    "sm-noup": {"path": "servicemonitor-honor", "with_up": False},
    "fast": {"path": "static", "step_s": 15},
    "podname": {"path": "static", "host": EXPORTER_POD},
    "nolabels": {"path": "static", "team_label": False},
}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[promserver.PrometheusServer]:
    samples = [s for cluster, case in CASES.items() for s in fleet(cluster, **case)]  # type: ignore[arg-type]
    with serve_samples(samples, tmp_path_factory.mktemp("source-check")) as server:
        yield server


def write_config(folder: Path, url: str, cluster: str, *, delta: int = 30) -> Path:
    config = folder / f"{cluster}.yaml"
    config.write_text(
        f"""\
scrape_interval_seconds: {delta}
clusters:
  - name: {cluster}
    source:
      kind: prometheus
      url: {url}
      selector: cluster="{cluster}"
      retries: 0
rate_card:
  models:
    - {{model: H100-80GB, aliases: ["NVIDIA H100*"], price_per_gpu_hour: 4.10}}
tenants:
  - name: research
    pod_labels: [{{key: team, value: research}}]
  - name: ml-training
    namespaces: [training]
warehouse:
  path: {folder / "warehouse"}
""",
        encoding="utf-8",
    )
    return config


def check(config: Path, *extra: str) -> list[str]:
    return [
        "source",
        "check",
        "--config",
        str(config),
        "--at",
        END.isoformat(),
        "--window-minutes",
        str(WINDOW_MINUTES),
        *extra,
    ]


def run(
    capsys: pytest.CaptureFixture[str],
    prometheus: promserver.PrometheusServer,
    tmp_path: Path,
    cluster: str,
    **kw: int,
) -> tuple[int, str]:
    code = main(check(write_config(tmp_path, prometheus.url, cluster, **kw)))
    return code, " ".join(capsys.readouterr().out.split())  # the table's wrapping undone


def findings(
    capsys: pytest.CaptureFixture[str],
    prometheus: promserver.PrometheusServer,
    tmp_path: Path,
    cluster: str,
    **kw: int,
) -> tuple[int, list[dict[str, str]]]:
    code = main([*check(write_config(tmp_path, prometheus.url, cluster, **kw)), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["misbills"] is (code == 1)
    (report,) = doc["clusters"]
    assert report["cluster"] == cluster
    return code, report["findings"]


def misbilling(
    capsys: pytest.CaptureFixture[str],
    prometheus: promserver.PrometheusServer,
    tmp_path: Path,
    cluster: str,
    check: str,
    exporter: str = "",
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The one finding of `check` (of `exporter`, where given) for `cluster`, which must misbill (exit 1),
    and every finding."""
    code, found = findings(capsys, prometheus, tmp_path, cluster)
    assert code == 1
    (finding,) = [f for f in found if f["check"] == check and exporter in f["exporter"]]
    assert finding["verdict"] == "misbills"
    return finding, found


def test_a_clean_static_fleet_misbills_nothing(
    capsys: pytest.CaptureFixture[str], prometheus: promserver.PrometheusServer, tmp_path: Path
) -> None:
    code, found = findings(capsys, prometheus, tmp_path, "clean")
    assert code == 0, found
    assert {f["verdict"] for f in found} == {"ok"}
    path = next(f for f in found if f["check"] == "scrape path and who holds each GPU")
    assert "static config" in path["found"]
    interval = next(f for f in found if f["exporter"] == "dcgm-exporter" and f["check"] == "scrape interval")
    assert "every 30 s" in interval["found"]
    labels = next(f for f in found if f["check"] == "pod labels exported")
    assert "team" in labels["found"]


def test_a_service_monitor_with_up_recorded_is_named_and_bills_right(
    capsys: pytest.CaptureFixture[str], prometheus: promserver.PrometheusServer, tmp_path: Path
) -> None:
    code, found = findings(capsys, prometheus, tmp_path, "sm")
    assert code == 0, found
    (path,) = [f for f in found if f["check"] == "scrape path and who holds each GPU"]
    assert path["verdict"] == "ok"
    assert "ServiceMonitor (service nvidia-dcgm-exporter)" in path["found"]
    assert "honorLabels: false" in path["found"]
    assert "`up` recorded for every target" in path["found"]
    assert "relabelings" in path["action"]  # recommended, though it bills right
    # The table a person reads says the same, and that nothing misbills.
    code, out = run(capsys, prometheus, tmp_path, "sm")
    assert code == 0
    assert "ServiceMonitor" in out and "verdict" in out
    assert out.endswith("nothing found would misbill")


def test_a_service_monitor_without_up_misbills_its_gpus_as_free(
    capsys: pytest.CaptureFixture[str], prometheus: promserver.PrometheusServer, tmp_path: Path
) -> None:
    path, _ = misbilling(capsys, prometheus, tmp_path, "sm-noup", "scrape path and who holds each GPU")
    assert "no `up` recorded for 1 target(s)" in path["found"]
    assert "cannot be told from the exporter's own pod" in path["found"]
    # Both GPUs: the held one (pod train-0) and the free one (the exporter's own pod) read alike.
    assert path["cost"].startswith("2 GPU(s), about 0.3 GPU-hours")
    assert "idle capacity" in path["cost"]
    assert "keep `up`" in path["action"]


def test_a_faster_exporter_than_the_configured_interval_misbills_naming_both(
    capsys: pytest.CaptureFixture[str], prometheus: promserver.PrometheusServer, tmp_path: Path
) -> None:
    interval, _ = misbilling(capsys, prometheus, tmp_path, "fast", "scrape interval", "dcgm-exporter")
    assert "scraped every 15 s" in interval["found"] and "configured Δ 30 s" in interval["found"]
    # 2 GPUs x 40 samples in 10 minutes, each billed 30 s: 0.7 GPU-hours billed for 0.3 held.
    assert "billed 2 times over (about 0.7 GPU-hours billed for about 0.3 held" in interval["cost"]
    assert "scrape_interval_seconds: 15" in interval["action"]


def test_a_host_name_that_is_an_unknown_exporter_pod_misbills(
    capsys: pytest.CaptureFixture[str], prometheus: promserver.PrometheusServer, tmp_path: Path
) -> None:
    host, _ = misbilling(capsys, prometheus, tmp_path, "podname", "node of each GPU")
    assert EXPORTER_POD in host["found"]
    assert "NODE_NAME" in host["action"]


def test_tenant_pod_labels_not_allow_listed_misbill_with_the_flag_to_set(
    capsys: pytest.CaptureFixture[str], prometheus: promserver.PrometheusServer, tmp_path: Path
) -> None:
    labels, found = misbilling(capsys, prometheus, tmp_path, "nolabels", "pod labels exported")
    assert labels["action"] == "start kube-state-metrics with --metric-labels-allowlist=pods=[team]"
    assert [f for f in found if f["verdict"] != "ok"] == [labels]
    code, out = run(capsys, prometheus, tmp_path, "nolabels")
    assert code == 1
    assert "1 finding(s) would misbill: nolabels: kube-state-metrics pod labels exported" in out


def test_the_command_as_a_process_exits_1_and_2_without_a_traceback(
    prometheus: promserver.PrometheusServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path, prometheus.url, "podname")
    done = subprocess.run(
        [sys.executable, "-m", "gpumeter", *check(config)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "misbills" in done.stdout

    dead = write_config(tmp_path, f"http://127.0.0.1:{promserver.free_port()}", "clean")
    done = subprocess.run(
        [sys.executable, "-m", "gpumeter", *check(dead)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("error:") and "connection failed" in done.stderr

    done = subprocess.run(
        [sys.executable, "-m", "gpumeter", *check(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "file not found" in done.stderr
