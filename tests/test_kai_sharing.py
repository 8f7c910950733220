"""KAI Scheduler GPU sharing (R5, R6), hand-computed.

A KAI fractional pod requests no nvidia.com/gpu; it carries the annotation `gpu-fraction` and the label
`runai-gpu-group`. A reservation pod in namespace `kai-resource-reservation`, with the same label, holds
the GPU, and dcgm-exporter names that reservation pod on the device's series. A device sample held by a
reservation pod is held by the Running pods of its GPU group: 1/n each (`share: equal`), or their
`gpu-fraction` (`share: requested`: as declared when they fit, the rest to `__idle__`, in proportion when
over-committed). With no group member Running, the reservation pod itself stays the holder (its
namespace resolves like any other: here to `__unallocated__`).

Every case: one H100 at 3.6 per GPU-hour, Δ = 60 s, so one device sample costs 60/3600 × 3.6 = 0.06.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_rules import H100, IDLE, UNALLOCATED, D, charges, factory, holder, make_config, meter, rows

import gpumeter_sim as simulator
from gpumeter.config import EXAMPLE_CONFIG, parse_config
from gpumeter.ingest.parquet import ParquetRawSource
from gpumeter.models.runner import meter_day
from tests.builders import FactoryBuilder

RESERVATION = ("kai-resource-reservation", "gpu-reservation-n1-x7k2p", "main")
A = ("ns-a", "fa", "main")  # team-a, gpu-fraction 0.5
B = ("ns-b", "fb", "main")  # team-b, gpu-fraction 0.25
GROUP = "0b7d2a8e-kai-group"


def kai_gpu(fractions: dict[str, str] | None = None, samples: int = 4) -> FactoryBuilder:
    """GPU-K held (per dcgm-exporter) by the reservation pod at samples 0..3, util 60 %. Group members:
    A Running at 0..2 then Succeeded; B Running at 0..1 then Succeeded. So: s0, s1 A+B; s2 A; s3 none."""
    fractions = fractions if fractions is not None else {"fa": "0.5", "fb": "0.25"}
    f = factory().gpu("n1", "GPU-K", H100)
    f.samples("GPU-K", range(samples), util=60, pod=RESERVATION)
    f.pod_labels(RESERVATION[0], RESERVATION[1], {"runai-gpu-group": GROUP})
    for pod, last_running in ((A, 2), (B, 1)):
        namespace, name, _ = pod
        f.pod_labels(namespace, name, {"runai-gpu-group": GROUP, "kai.scheduler/queue": "q"})
        if name in fractions:
            f.pod_annotations(namespace, name, {"gpu-fraction": fractions[name]})
        for index in range(samples):
            f.pod_phase(namespace, name, index, "Running" if index <= last_running else "Succeeded")
    for index in range(samples):
        f.pod_phase(RESERVATION[0], RESERVATION[1], index)
    return f


def test_r6_kai_equal_splits_the_reserved_gpu_among_running_group_members() -> None:
    out = meter(kai_gpu())
    # s0, s1: A and B 1/2 each; s2: A alone; s3: nobody Running, the reservation pod holds it.
    assert holder(out, "fa")["device_seconds"] == D(30 + 30 + 60)
    assert holder(out, "fb")["device_seconds"] == D(30 + 30)
    assert holder(out, RESERVATION[1])["device_seconds"] == D(60)
    assert {r["holder_source"] for r in rows(out, "mart_device_seconds", pod="fa")} == {"kai"}
    assert holder(out, RESERVATION[1])["holder_source"] == "labels"
    assert charges(out) == {
        ("team-a", "reserved"): D("0.12"),
        ("team-b", "reserved"): D("0.06"),
        (UNALLOCATED, "reserved"): D("0.06"),  # kai-resource-reservation maps to no tenant (R7)
        (IDLE, "idle"): D(0),
    }


def test_r6_kai_requested_uses_gpu_fraction_and_leaves_the_rest_idle() -> None:
    out = meter(kai_gpu(), make_config(share="requested"))
    # s0, s1: A 0.5 and B 0.25 (they fit: as declared); s2: A 0.5; s3: the reservation pod, 1.
    assert holder(out, "fa")["device_seconds"] == D(30 + 30 + 30)
    assert holder(out, "fb")["device_seconds"] == D(15 + 15)
    assert holder(out, RESERVATION[1])["device_seconds"] == D(60)
    assert charges(out) == {
        ("team-a", "reserved"): D("0.09"),
        ("team-b", "reserved"): D("0.03"),
        (UNALLOCATED, "reserved"): D("0.06"),
        (IDLE, "idle"): D("0.06"),  # 15 + 15 + 30 undeclared device-seconds: 60 s × 0.001
    }


def test_r6_kai_over_committed_fractions_are_proportional() -> None:
    out = meter(kai_gpu({"fa": "0.75", "fb": "0.5"}, samples=1), make_config(share="requested"))
    # One sample, 0.75 + 0.5 = 1.25 > 1: 0.6 and 0.4 of 60 s.
    assert holder(out, "fa")["device_seconds"] == D(36)
    assert holder(out, "fb")["device_seconds"] == D(24)
    assert charges(out)[(IDLE, "idle")] == D(0)


def test_r6_kai_a_member_without_gpu_fraction_makes_the_sample_equal() -> None:
    out = meter(kai_gpu({"fa": "0.5"}, samples=1), make_config(share="requested"))
    assert (holder(out, "fa")["device_seconds"], holder(out, "fb")["device_seconds"]) == (D(30), D(30))


def test_r5_kai_only_running_pods_of_the_same_group_are_holders() -> None:
    f = kai_gpu(samples=1)
    other = ("ns-b", "other-group-pod", "main")
    f.pod_labels(other[0], other[1], {"runai-gpu-group": "another-group"})
    f.pod_phase(other[0], other[1], 0)
    pending = ("ns-a", "pending-member", "main")
    f.pod_labels(pending[0], pending[1], {"runai-gpu-group": GROUP})
    f.pod_phase(pending[0], pending[1], 0, "Pending")
    out = meter(f)
    assert {r["pod"] for r in out["mart_device_seconds"].to_pylist()} == {"fa", "fb"}


def test_r6_a_reservation_pod_without_a_group_label_is_an_ordinary_holder() -> None:
    f = factory().gpu("n1", "GPU-K", H100)
    f.samples("GPU-K", range(2), util=60, pod=RESERVATION)
    f.pod_labels(A[0], A[1], {"runai-gpu-group": GROUP})
    f.pod_phase(A[0], A[1], 0)
    f.pod_phase(A[0], A[1], 1)
    out = meter(f)
    assert holder(out, RESERVATION[1])["device_seconds"] == D(120)
    assert rows(out, "mart_device_seconds", pod="fa") == []


@pytest.mark.parametrize("share", ["equal", "requested"])
def test_r11_a_kai_gpu_is_allocated_whoever_holds_it(share: str) -> None:
    out = meter(kai_gpu(), make_config(share=share))
    categories = {r["category"] for r in out["mart_stranded_capacity"].to_pylist()}
    assert categories == {"allocated_active"}
    total = sum((r["gpu_seconds"] for r in out["mart_stranded_capacity"].to_pylist()), Decimal(0))
    assert total == D(240)


# --- the simulated factory's KAI GPU, end to end -------------------------------------------------


@pytest.mark.parametrize("share", ["equal", "requested"])
def test_the_simulated_kai_gpu_is_billed_to_its_running_fractional_pods(tmp_path: Path, share: str) -> None:
    """The simulator's KAI GPU through the Parquet source and the SQL models; the expected device-seconds
    are derived independently from the raw kube-state-metrics rows (phases, group labels, fractions)."""
    spec = simulator.FactorySpec(
        h100_nodes=1, a100_nodes=0, h200_nodes=0, gpus_per_node=2, scrape_interval_s=300, days=2,
        mig_fraction=0.0, timesliced_gpus=0, dra_gpus=0, outage=False, cordoned_node=False, xid_gpu=False,
        energy_reset=False,
    )  # fmt: skip
    day = spec.day_list[1]
    simulator.write_parquet(spec, tmp_path)
    raw = ParquetRawSource(tmp_path).fetch_day(spec.cluster, day, 600_000)
    doc = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    doc.update(scrape_interval_seconds=300, share=share)
    doc["clusters"][0]["source"]["path"] = str(tmp_path)
    out = meter_day(raw, parse_config(yaml.safe_dump(doc)), spec.cluster, day)

    kai_node = simulator.factory_layout(spec).nodes[-1].name
    got = {
        r["pod"]: r["device_seconds"] for r in out["mart_device_seconds"].to_pylist() if r["node"] == kai_node
    }
    start, end = (
        datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000 + k * 86_400_000 for k in (0, 1)
    )
    # Rows of the day and its lookback, as the models read them; a pod is Running at a sample by the latest
    # scrape of kube-state-metrics at or before it (at most kube_lookback_seconds, 300 s, old): a pod that
    # scrape does not show has ended (R5, R1a).
    kube = raw.kube.to_pylist()
    labels = [json.loads(r["labels"]) for r in kube]
    group = {
        lab["pod"]: lab.get("label_runai_gpu_group")
        for lab, r in zip(labels, kube, strict=True)
        if r["metric"] == "kube_pod_labels"
    }
    fraction = {
        lab["pod"]: Decimal(lab["annotation_gpu_fraction"])
        for lab, r in zip(labels, kube, strict=True)
        if r["metric"] == "kube_pod_annotations"
    }
    phase: dict[tuple[str, int], bool] = {}
    for lab, r in zip(labels, kube, strict=True):
        if r["metric"] == "kube_pod_status_phase":
            key = (lab["pod"], r["ts_ms"])
            phase[key] = phase.get(key, False) or (lab["phase"] == "Running" and r["value"] == 1)

    scrapes = sorted({r["ts_ms"] for r in kube if r["metric"].startswith("kube_")})

    def is_running(pod: str, ts: int) -> bool:
        latest = max((s for s in scrapes if s <= ts), default=None)
        return latest is not None and ts - latest <= 300_000 and phase.get((pod, latest), False)

    reservation = next(pod for pod in group if pod.startswith("gpu-reservation-"))
    want: dict[str, Decimal] = defaultdict(Decimal)
    for ts in range(int(start), int(end), 300_000):
        members = {
            p for p, g in group.items() if g == group[reservation] and p != reservation and is_running(p, ts)
        }
        if not members:
            want[reservation] += 300
        for pod in members:
            want[pod] += 300 * fraction[pod] if share == "requested" else Decimal(300) / len(members)
    assert len(want) > 3 and want[reservation] > 0  # members came and went; some samples had none
    assert got.keys() == want.keys()
    for pod, seconds in want.items():
        assert got[pod] == pytest.approx(seconds, abs=Decimal("1e-9")), pod
    tenants = {r["tenant"] for r in out["mart_device_seconds"].to_pylist() if r["node"] == kai_node}
    assert tenants == {"serving", "ml-training", "research", UNALLOCATED}


# --- property: any fractions, any Running pattern ------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fractions=st.lists(st.integers(1, 150), min_size=1, max_size=3),
    running=st.lists(st.lists(st.booleans(), min_size=3, max_size=3), min_size=3, max_size=3),
)
def test_r6_r13_kai_shares_follow_the_declared_fractions_of_running_members(
    fractions: list[int], running: list[list[bool]]
) -> None:
    """share: requested, members m with gpu-fraction f_m (percent) Running at some of 3 samples: each
    sample gives m 60 × f_m / max(1, Σ running f), the reservation pod 60 when nobody runs, and R13 holds
    (`meter` checks it)."""
    f = factory().gpu("n1", "GPU-K", H100)
    f.samples("GPU-K", range(3), util=60, pod=RESERVATION)
    f.pod_labels(RESERVATION[0], RESERVATION[1], {"runai-gpu-group": GROUP})
    members = [(f"ns-{'ab'[i % 2]}", f"m{i}") for i in range(len(fractions))]
    for (namespace, pod), percent, pattern in zip(members, fractions, running, strict=False):
        f.pod_labels(namespace, pod, {"runai-gpu-group": GROUP})
        f.pod_annotations(namespace, pod, {"gpu-fraction": str(Decimal(percent) / 100)})
        for index, is_running in enumerate(pattern):
            f.pod_phase(namespace, pod, index, "Running" if is_running else "Pending")
    out = meter(f, make_config(share="requested"))
    want: dict[str, Decimal] = defaultdict(Decimal)
    for index in range(3):
        up = [
            (pod, Decimal(p) / 100)
            for (_, pod), p, pattern in zip(members, fractions, running, strict=False)
            if pattern[index]
        ]
        if not up:
            want[RESERVATION[1]] += 60
        total = max(Decimal(1), sum((x for _, x in up), Decimal(0)))
        for pod, x in up:
            want[pod] += 60 * x / total
    got = {r["pod"]: r["device_seconds"] for r in out["mart_device_seconds"].to_pylist()}
    assert got.keys() == {pod for pod, seconds in want.items() if seconds}
    for pod, seconds in got.items():
        assert seconds == pytest.approx(want[pod], abs=Decimal("1e-9")), pod
