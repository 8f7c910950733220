"""Hand-computed cases, one or a few per accounting rule of docs/rules.md (cited as `R<n>`).

Unless a test says otherwise: Δ = 60 s, so one sample is 1/60 h; H100 costs 3.60/GPU-hour (0.06 a sample),
A100-80GB 4.20/GPU-hour (0.07 a sample, so a 1/7 MIG slice is 0.01 a sample). Tenants: `team-a` owns
namespace `ns-a`, `team-b` owns `ns-b`. Money and GPU-seconds are DECIMAL(38, 12): every per-sample term is
rounded to 12 places before it is summed, and the expected values below are written out that way.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pytest
import yaml

from gpumeter.config import IDLE, UNALLOCATED, Config, parse_config
from gpumeter.ingest.schema import DCGM_GPU_UTIL
from gpumeter.models.day_checks import coverage
from gpumeter.models.device_classes import CatalogWarning
from gpumeter.models.project import AccountingError
from gpumeter.models.runner import meter_day
from tests.builders import FactoryBuilder

DAY = date(2026, 11, 1)
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"

RATE_CARD: dict[str, Any] = {
    "models": [
        {"model": "H100-80GB", "aliases": [H100], "price_per_gpu_hour": 3.6},
        {"model": "A100-80GB", "aliases": [A100], "price_per_gpu_hour": 4.2},
    ]
}
TENANTS: list[dict[str, Any]] = [
    {"name": "team-a", "namespaces": ["ns-a"]},
    {"name": "team-b", "namespaces": ["ns-b"]},
]

P1 = ("ns-a", "p1", "main")
P2 = ("ns-b", "p2", "main")


def D(value: str | int) -> Decimal:
    return Decimal(value)


# --- helpers ---------------------------------------------------------------------------------


def make_config(**overrides: Any) -> Config:
    doc: dict[str, Any] = {
        "clusters": [{"name": "c1", "source": {"kind": "parquet", "path": "/nonexistent"}}],
        "scrape_interval_seconds": 60,
        "rate_card": RATE_CARD,
        "tenants": TENANTS,
    }
    doc.update(overrides)
    return parse_config(yaml.safe_dump(doc))


def factory(day: date = DAY) -> FactoryBuilder:
    return FactoryBuilder("c1", day, scrape_s=60)


def meter(f: FactoryBuilder, config: Config | None = None) -> dict[str, pa.Table]:
    config = config or make_config()
    assert config.scrape_interval_seconds == f.scrape_s
    out = meter_day(f.build(), config, f.cluster, f.day)
    assert_conserved(out)  # R13 holds on every case of this file
    return out


def rows(out: dict[str, pa.Table], model: str, **where: Any) -> list[dict[str, Any]]:
    return [r for r in out[model].to_pylist() if all(r[k] == v for k, v in where.items())]


def one(out: dict[str, pa.Table], model: str, **where: Any) -> dict[str, Any]:
    found = rows(out, model, **where)
    assert len(found) == 1, f"{model} {where}: {found}"
    return found[0]


def holder(out: dict[str, pa.Table], pod: str, **where: Any) -> dict[str, Any]:
    return one(out, "mart_device_seconds", pod=pod, **where)


def categories(out: dict[str, pa.Table], node: str | None = None) -> dict[str, Decimal]:
    """R11 category -> GPU-seconds, for one node or the whole pool."""
    parts: dict[str, Decimal] = defaultdict(Decimal)
    for r in out["mart_stranded_capacity"].to_pylist():
        if node is None or r["node"] == node:
            parts[r["category"]] += r["gpu_seconds"]
    return dict(parts)


def charges(out: dict[str, pa.Table]) -> dict[tuple[str, str], Decimal]:
    """(tenant, charge_type) -> amount of mart_tenant_daily_cost, over GPU models and MIG profiles."""
    amounts: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for r in out["mart_tenant_daily_cost"].to_pylist():
        amounts[(r["tenant"], r["charge_type"])] += r["amount"]
    return dict(amounts)


def pool_cost(out: dict[str, pa.Table]) -> Decimal:
    return sum((r["pool_cost"] for r in out["mart_pool_daily_cost"].to_pylist()), D(0))


def observed_gpu_seconds(out: dict[str, pa.Table], node: str | None = None) -> Decimal:
    found = out["mart_pool_daily_cost"].to_pylist()
    return sum((r["observed_gpu_seconds"] for r in found if node is None or r["node"] == node), D(0))


def assert_conserved(out: dict[str, pa.Table]) -> None:
    """R13: Σ tenants + __unallocated__ + __idle__ = pool cost, exactly (Decimal equality, before rounding);
    R11: the categories sum to observed capacity exactly."""
    total = sum((r["amount"] for r in out["mart_tenant_daily_cost"].to_pylist()), D(0))
    assert total == pool_cost(out)
    assert sum(categories(out).values(), D(0)) == observed_gpu_seconds(out)


# --- R1 / R3 / R9: whole GPUs ----------------------------------------------------------------


def test_r1_r9_whole_gpu_device_seconds_charge_and_pool_cost() -> None:
    """R1: device-seconds = samples × Δ. R9: charge = Δ/3600 × price per sample; pool cost counts every observed
    GPU sample, held or not; __idle__ is the difference."""
    f = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.samples("GPU-1", range(5), util=50, pod=P1)
    f.samples("GPU-2", range(3), util=0)
    out = meter(f)

    p1 = holder(out, "p1")
    assert (p1["sample_count"], p1["device_seconds"], p1["gpu_seconds"]) == (5, D(300), D(300))
    assert p1["reserved_cost"] == D("0.30")  # 5 × 60/3600 × 3.60
    assert p1["busy_gpu_seconds"] == D(150)  # R10: 5 × 0.5 × 60
    assert (p1["tenant"], p1["weight"]) == ("team-a", 1.0)

    pool = one(out, "mart_pool_daily_cost", node="n1")
    assert (pool["gpu_model"], pool["gpu_samples"], pool["observed_gpu_seconds"]) == ("H100-80GB", 8, D(480))
    assert pool["pool_cost"] == D("0.48")  # 8 × 0.06
    assert charges(out) == {("team-a", "reserved"): D("0.30"), (IDLE, "idle"): D("0.18")}


def test_r1_a_duplicated_raw_sample_counts_once() -> None:
    """R1: every raw sample is counted once and only once (an HA replica's copy of a sample is the sample)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", [0, 0, 1], util=50, pod=P1)
    out = meter(f)
    assert holder(out, "p1")["device_seconds"] == D(120)
    assert pool_cost(out) == D("0.12")


def test_r1_a_gpu_sampled_twice_within_half_an_interval_is_billed_as_it_came_and_reported() -> None:
    """R1 (our reading): a GPU sample at most Δ/2 after the GPU's previous one repeats a scrape (one scrape
    delivered twice at an offset, or Δ larger than the real interval). It is billed as it came, each sample
    Δ, and reported: data_quality's repeated_scrape_samples, and the coverage check fails (a warning)."""
    f = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.samples("GPU-1", range(4), util=50)
    f.samples("GPU-2", range(4), util=50)
    # GPU-1 seen again 20 s after scrape 1 and exactly Δ/2 = 30 s after scrape 2 (at most Δ/2: repeats; scrape
    # 3 then follows that one by 30 s and repeats too), and 31 s after scrape 3 (more than Δ/2: its own).
    labels = {"hostname": "n1", "uuid": "GPU-1", "gpu": "0", "model_name": H100}
    for ts in (f.ts(1) + 20_000, f.ts(2) + 30_000, f.ts(3) + 31_000):
        f.dcgm_row(ts, DCGM_GPU_UTIL, 50.0, **labels)
    out = meter(f)
    quality = one(out, "mart_data_quality", node="n1")
    # By hand: GPU-1's samples at 0, 60, 80, 120, 150, 180 and 211 s: 80, 150 and 180 are at most 30 s after
    # the one before (3 × 60 s at stake, an upper bound: 2 samples were extra); GPU-2 has 4, none. Billed as
    # they came: 11 samples × 60 s = 660 GPU-seconds, 0.66 at 3.60 an hour.
    assert (quality["repeated_scrape_samples"], quality["repeated_scrape_gpu_seconds"]) == (3, 180.0)
    assert quality["observed_gpu_seconds"] == 660.0 and pool_cost(out) == D("0.66")
    check = coverage({"c1": out}, make_config())
    assert not check.passed and check.figures["repeated_scrapes"] == ["c1/n1: 3 samples"]
    # Without the repeats, nothing is reported and the check passes (every expected GPU-second observed).
    clean = meter(factory().gpu("n1", "GPU-1", H100).samples("GPU-1", range(4), util=50))
    assert one(clean, "mart_data_quality", node="n1")["repeated_scrape_samples"] == 0
    assert coverage({"c1": clean}, make_config()).passed


# --- R3: MIG weights -------------------------------------------------------------------------


def mig_gpu(f: FactoryBuilder, node: str = "n2", uuid: str = "GPU-M") -> FactoryBuilder:
    """An A100-80GB cut into 3g.40gb (held by p1) + 2g.20gb (held by p2) + 1g.10gb (free), 2 samples."""
    f.gpu(node, uuid, A100)
    f.samples(uuid, range(2), gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=P1)
    f.samples(uuid, range(2), gr=0.5, gpu_i_id="2", profile="2g.20gb", pod=P2)
    f.samples(uuid, range(2), gr=0.0, gpu_i_id="3", profile="1g.10gb")
    return f


def test_r3_mig_compute_weights_and_unpartitioned_remainder() -> None:
    """R3 (mig_weight: compute): 3/7, 2/7, 1/7; R4/R11: the uncovered 1/7 is mig_unpartitioned capacity."""
    out = meter(mig_gpu(factory()))

    p1, p2 = holder(out, "p1"), holder(out, "p2")
    assert (p1["mig_profile"], p1["weight"]) == ("3g.40gb", 3 / 7)
    assert (p2["mig_profile"], p2["weight"]) == ("2g.20gb", 2 / 7)
    assert p1["device_seconds"] == D(120)  # device-seconds are not weighted
    assert p1["gpu_seconds"] == 2 * D("25.714285714286")  # 60 × 3/7 per sample
    assert p2["gpu_seconds"] == 2 * D("17.142857142857")  # 60 × 2/7
    assert p1["reserved_cost"] == D("0.06")  # 2 × 60/3600 × 3/7 × 4.20
    assert p2["reserved_cost"] == D("0.04")

    assert pool_cost(out) == D("0.14")  # the GPU once per sample, at the whole GPU's price
    assert charges(out) == {
        ("team-a", "reserved"): D("0.06"),
        ("team-b", "reserved"): D("0.04"),
        (IDLE, "idle"): D("0.04"),  # the free 1g + the unpartitioned 1/7
    }
    # R4: the uncovered 1/7 from whole 56ths, 60 × 8/56 = 8.571428571428|57… → 8.571428571429 a sample, as
    # much as the free 1g. The instances' rounded terms leave 60 − 8.571428571429 − (25.714285714286 +
    # 17.142857142857 + 8.571428571429) = −0.000000000001 a sample, counted with the first instance (p1's).
    assert categories(out, "n2") == {
        "allocated_active": 2 * (D("25.714285714286") + D("17.142857142857") - D("0.000000000001")),
        "free": 2 * D("8.571428571429"),  # the free 1g.10gb
        "mig_unpartitioned": 2 * D("8.571428571429"),
    }
    unpartitioned = one(out, "mart_mig_slice_usage", mig_profile="unpartitioned")
    assert unpartitioned["unpartitioned_slice_seconds"] == 2 * 60  # one of 7 slices, 2 samples


def test_r3_mig_memory_weights() -> None:
    """R3 (mig_weight: memory): 3g.40gb = 4/8, 2g.20gb = 2/8, 1g.10gb = 1/8; 1/8 unpartitioned."""
    config = make_config(rate_card={**RATE_CARD, "mig_weight": "memory"})
    out = meter(mig_gpu(factory()), config)

    p1, p2 = holder(out, "p1"), holder(out, "p2")
    assert (p1["weight"], p2["weight"]) == (0.5, 0.25)
    assert (p1["gpu_seconds"], p2["gpu_seconds"]) == (D(60), D(30))  # 2 × 30, 2 × 15
    assert (p1["reserved_cost"], p2["reserved_cost"]) == (D("0.07"), D("0.035"))  # 2 × 4.20/60 × 4/8, × 2/8
    assert categories(out, "n2") == {
        "allocated_active": D(90),
        "free": D(15),  # 2 × 60 × 1/8
        "mig_unpartitioned": D(15),
    }


def twelve_places(exact: Fraction) -> Decimal:
    """An exact value rounded half up to 12 places, as R1 rounds each per-sample term."""
    scaled = exact * 10**12
    return Decimal(int(scaled + Fraction(1, 2)) if scaled >= 0 else -int(-scaled + Fraction(1, 2))) / 10**12


@pytest.mark.parametrize("delta", [15, 30, 60])
def test_r4_unpartitioned_mig_capacity_is_whole_slices_exactly(delta: int) -> None:
    """R4/R11: the part of a MIG GPU no instance covers is counted in whole slices, (7 − Σ slices) × Δ / 7 at a
    sample. GPU-F, 3g + 2g + 2g, covers 7 of 7: no mig_unpartitioned at all, even where Δ × 3/7 + 2 × Δ × 2/7,
    each rounded to 12 places, is not Δ (Δ = 30: 12.857142857143 + 2 × 8.571428571429 = 30.000000000001;
    Δ = 15: 6.428571428571 + 2 × 4.285714285714 = 14.999999999999). GPU-P, 3g + 2g, leaves 2 of 7: Δ × 2/7 a
    sample. Each GPU's categories add up to Δ a sample, exactly."""
    f = FactoryBuilder("c1", DAY, scrape_s=delta)
    f.gpu("n1", "GPU-F", A100).gpu("n2", "GPU-P", A100)
    f.samples("GPU-F", range(3), gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=P1)
    f.samples("GPU-F", range(3), gr=0.5, gpu_i_id="2", profile="2g.20gb", pod=P2)
    f.samples("GPU-F", range(3), gr=0.0, gpu_i_id="3", profile="2g.20gb")
    f.samples("GPU-P", range(3), gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=("ns-a", "p3", "main"))
    f.samples("GPU-P", range(3), gr=0.0, gpu_i_id="2", profile="2g.20gb")
    out = meter(f, make_config(scrape_interval_seconds=delta))

    whole = 3 * Decimal(delta)  # 3 samples of one GPU
    full, partial = categories(out, "n1"), categories(out, "n2")
    assert set(full) == {"allocated_active", "free"}  # no mig_unpartitioned row, not even a 0 or −0.0
    assert sum(full.values(), D(0)) == whole
    assert sum(partial.values(), D(0)) == whole
    # By hand, exactly: 3 samples × Δ × 2/7 (60/7 = 8.571428571428|57… at Δ = 30, 120/7 = 17.142857142857|14…
    # at Δ = 60, 30/7 = 4.285714285714|29… at Δ = 15), rounded to 12 places a sample.
    assert partial["mig_unpartitioned"] == 3 * twelve_places(Fraction(2 * delta, 7))
    if delta == 30:
        assert partial["mig_unpartitioned"] == 3 * D("8.571428571429")
    # The held and free parts are each within 10⁻¹² s a sample of their exact share of the GPU.
    exact = {
        "n1": {"allocated_active": Fraction(5 * delta, 7), "free": Fraction(2 * delta, 7)},
        "n2": {"allocated_active": Fraction(3 * delta, 7), "free": Fraction(2 * delta, 7)},
    }
    for node, parts in (("n1", full), ("n2", partial)):
        for category, share in exact[node].items():
            assert abs(Fraction(parts[category]) - 3 * share) <= Fraction(3, 10**12), (node, category)
    assert (
        one(out, "mart_mig_slice_usage", uuid="GPU-F", mig_profile="unpartitioned")[
            "unpartitioned_slice_seconds"
        ]
        == 0
    )


def test_r3_unknown_parseable_profile_weighs_n_over_7_with_a_warning() -> None:
    """R3: `7g.79gb` is in no catalog but parses as <N>g.<M>gb: it weighs 7/7 = 1, with a warning."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="0", profile="7g.79gb", pod=P1)
    with pytest.warns(CatalogWarning, match=r"7g\.79gb"):
        out = meter(f)
    p1 = holder(out, "p1")
    assert (p1["weight"], p1["gpu_seconds"], p1["reserved_cost"]) == (1.0, D(120), D("0.14"))
    assert categories(out, "n2") == {"allocated_active": D(120)}  # 7 of 7 slices: nothing unpartitioned


def test_r3_unknown_profile_weighs_n_over_7_under_memory_weight_too() -> None:
    """R3: an unknown profile weighs N/7 whatever `mig_weight` says (its memory slices are unknown)."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="1", profile="3g.39gb", pod=P1)
    config = make_config(rate_card={**RATE_CARD, "mig_weight": "memory"})
    with pytest.warns(CatalogWarning, match=r"3g\.39gb"):
        out = meter(f, config)
    p1 = holder(out, "p1")
    assert p1["weight"] == 3 / 7
    assert p1["reserved_cost"] == D("0.06")  # 2 × 4.20/60 × 3/7


def test_r3_unparseable_profile_is_an_error_naming_it() -> None:
    """R3: a profile that does not parse as <N>g.<M>gb stops the run, naming it."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.sample("GPU-M", 0, gr=0.5, gpu_i_id="1", profile="half-gpu", pod=P1)
    with pytest.raises(AccountingError, match="'half-gpu'"):
        meter_day(f.build(), make_config(), "c1", DAY)


def test_r8_explicit_mig_profile_price_overrides_the_weighted_price() -> None:
    """R8: an explicit per-profile price (per instance-hour) replaces weight × GPU price for the holder; the
    pool cost stays the GPU's price (R9)."""
    a100 = {
        "model": "A100-80GB",
        "aliases": [A100],
        "price_per_gpu_hour": 4.2,
        "mig_profiles": {"3g.40gb": 2.4},
    }
    config = make_config(rate_card={"models": [RATE_CARD["models"][0], a100]})
    out = meter(mig_gpu(factory()), config)
    assert holder(out, "p1")["reserved_cost"] == D("0.08")  # 2 × 60/3600 × 2.40
    assert holder(out, "p2")["reserved_cost"] == D("0.04")  # no override: 2 × 2/7 × 4.20 / 60
    assert pool_cost(out) == D("0.14")
    assert charges(out)[(IDLE, "idle")] == D("0.02")  # 0.14 − 0.08 − 0.04


def test_r8_a_price_change_counts_from_its_day_and_a_day_metered_again_keeps_its_own_prices() -> None:
    """R8, R15: rate-card prices change from a UTC day on. Each day is metered at the prices in effect that
    day, so re-metering 1 November after the changes were configured still bills it at its own prices. A
    change replaces the model's MIG profile prices too: the ones it does not name are weight × its price."""
    a100 = {
        "model": "A100-80GB",
        "aliases": [A100],
        "price_per_gpu_hour": 4.2,
        "mig_profiles": {"3g.40gb": 2.4},
        "price_changes": [
            {"effective_from": "2026-11-02", "price_per_gpu_hour": 8.4},
            {"effective_from": "2026-11-03", "price_per_gpu_hour": 6.3, "mig_profiles": {"2g.20gb": 3.6}},
        ],
    }
    config = make_config(rate_card={"models": [RATE_CARD["models"][0], a100]})
    nov1, nov2, nov3 = (meter(mig_gpu(factory(DAY + timedelta(days=n))), config) for n in range(3))
    # By hand, two samples of 60 s (1/60 h each) of p1 (3g.40gb, 3/7) and p2 (2g.20gb, 2/7):
    # 1 Nov: p1 at its own 2.40 an hour, 2 × 0.04; p2 2/7 × 4.20 = 1.20 an hour, 2 × 0.02; the GPU 2 × 0.07.
    # 2 Nov: 8.40 and no profile prices: p1 3/7 × 8.40, 2 × 0.06; p2 2/7 × 8.40, 2 × 0.04; the GPU 2 × 0.14.
    # 3 Nov: 6.30, 2g.20gb at 3.60: p1 3/7 × 6.30, 2 × 0.045; p2 2 × 0.06; the GPU 2 × 0.105.
    for out, p1, p2, pool in (
        (nov1, "0.08", "0.04", "0.14"),
        (nov2, "0.12", "0.08", "0.28"),
        (nov3, "0.09", "0.12", "0.21"),
    ):
        assert holder(out, "p1")["reserved_cost"] == D(p1)
        assert holder(out, "p2")["reserved_cost"] == D(p2)
        assert pool_cost(out) == D(pool)
    # The prices before the first change are those of the model itself: a config without changes agrees.
    before = meter(
        mig_gpu(factory()),
        make_config(
            rate_card={
                "models": [RATE_CARD["models"][0], {k: v for k, v in a100.items() if k != "price_changes"}]
            }
        ),
    )
    assert before["mart_device_seconds"].equals(nov1["mart_device_seconds"])


# --- R4: observed capacity -------------------------------------------------------------------


def test_r4_gpu_level_series_of_a_mig_gpu_is_not_a_device() -> None:
    """R4: a MIG GPU's GPU-level series (no GPU_I_ID) makes the GPU observed but is not a device: even with
    pod labels it bills no one while an instance shows; a later sample where only it exists (power, energy,
    no pod: nothing a whole GPU alone shows, R3) is still MIG mode, all mig_unpartitioned."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.samples("GPU-M", range(2), energy=1000, pod=P2)  # GPU-level: power/energy/XID carry no GPU_I_ID
    f.sample("GPU-M", 2, energy=1000)
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=P1)
    out = meter(f)

    assert {r["device_id"] for r in out["mart_device_seconds"].to_pylist()} == {"GPU-M/1"}
    assert rows(out, "mart_device_seconds", pod="p2") == []
    assert observed_gpu_seconds(out) == D(180)  # observed at 3 samples
    assert pool_cost(out) == D("0.21")
    assert categories(out, "n2") == {
        "allocated_active": 2 * D("25.714285714286"),
        "mig_unpartitioned": 2 * D("34.285714285714") + D(60),  # 60 × 4/7 = 34.285714285714|29… a sample
    }
    assert charges(out) == {("team-a", "reserved"): D("0.06"), (IDLE, "idle"): D("0.15")}


def test_r4_unobserved_gpus_are_reported_not_billed() -> None:
    """R4: GPUs kube-state-metrics reports (nvidia_com_gpu capacity, or the nvidia.com/gpu.count label) that
    no device series shows are unobserved GPU-seconds in mart_data_quality, and cost nothing."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(4), util=50, pod=P1)
    for i in range(4):
        f.node_state("n1", i, gpus=2)  # 2 GPUs by capacity, 1 seen
        f.node_state("n3", i, gpu_count_label=4)  # 4 GPUs by label, none seen
    out = meter(f)

    n1 = one(out, "mart_data_quality", node="n1")
    assert (n1["observed_gpus"], n1["expected_gpus"]) == (1, 2)
    assert (n1["observed_gpu_seconds"], n1["expected_gpu_seconds"]) == (240, 480)
    assert n1["unobserved_gpu_seconds"] == 240
    n3 = one(out, "mart_data_quality", node="n3")
    assert (n3["observed_gpus"], n3["expected_gpus"], n3["unobserved_gpu_seconds"]) == (0, 4, 4 * 4 * 60)
    assert pool_cost(out) == D("0.24")  # GPU-1 only
    assert rows(out, "mart_pool_daily_cost", node="n3") == []


def test_r4_outage_gap_bills_nothing_for_the_gap() -> None:
    """R4/R1: samples missing for 3 scrapes (exporter down) are not capacity and not charged."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", [0, 1, 5], util=50, pod=P1)
    out = meter(f)
    assert holder(out, "p1")["device_seconds"] == D(180)
    assert observed_gpu_seconds(out) == D(180)
    assert charges(out) == {("team-a", "reserved"): D("0.18"), (IDLE, "idle"): D(0)}


def test_r4_a_gpu_named_by_its_exporter_pod_is_on_that_pod_s_node() -> None:
    """R4: dcgm-exporter without NODE_NAME writes its own pod's name as the host; the GPU is on the node
    kube-state-metrics places that pod on, so its node is expected and observed there (nothing unobserved, no
    phantom node). A host that is neither a node nor a known pod is taken as it came."""
    exporter = "nvidia-dcgm-exporter-x7k2p"
    f = factory().gpu(exporter, "GPU-1", H100).gpu("lost-host", "GPU-2", H100, index="1")
    f.samples("GPU-1", range(4), util=50, pod=P1)
    f.samples("GPU-2", range(4), util=50)
    for i in range(4):
        f.node_state("n1", i, gpus=1)
        f.pod_info("gpu-operator", exporter, "n1", i)
    out = meter(f)

    n1 = one(out, "mart_data_quality", node="n1")
    # By hand: one GPU seen 4 samples × 60 s on n1, which reports 1 GPU for the same 240 s.
    assert (n1["observed_gpus"], n1["observed_gpu_seconds"], n1["unobserved_gpu_seconds"]) == (1, 240, 0)
    assert rows(out, "mart_data_quality", node=exporter) == []
    assert {r["node"] for r in out["mart_pool_daily_cost"].to_pylist()} == {"n1", "lost-host"}
    assert holder(out, "p1")["device_seconds"] == D(240)


def test_r4_an_unknown_host_under_opencost_prices_names_the_host_not_opencost() -> None:
    """R8/R4: under OpenCost prices, a GPU whose host kube-state-metrics knows neither as a node nor as a pod
    cannot be priced; the error names the host and NODE_NAME, not a missing OpenCost scrape."""
    f = factory().gpu("nvidia-dcgm-exporter-zz9", "GPU-1", H100)
    f.samples("GPU-1", range(4), util=50)
    for i in range(4):
        f.node_state("n1", i, gpus=1)
        opencost_price(f, "n1", i, 3.6)
    config = make_config(rate_card={"price_source": "opencost", "models": []})
    with pytest.raises(AccountingError) as err:
        meter_day(f.build(), config, f.cluster, f.day)
    assert "'nvidia-dcgm-exporter-zz9'" in str(err.value) and "NODE_NAME" in str(err.value)


def test_r1_a_dcgm_interval_other_than_delta_stops_the_day_naming_both() -> None:
    """R1: Δ is what a DCGM sample stands for. Samples every 30 s under Δ = 60 s would bill each for 60 s, twice
    the time: the day stops, naming 30 and 60. Samples every 60 s with a long outage meter as usual."""
    f = FactoryBuilder("c1", DAY, scrape_s=30).gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(120), util=50, pod=P1)  # an hour: 119 gaps of 30 s
    with pytest.raises(AccountingError) as err:
        meter_day(f.build(), make_config(), f.cluster, f.day)
    message = str(err.value)
    assert "every 30 s" in message and "scrape_interval_seconds is 60 s" in message and "'n1'" in message

    g = factory().gpu("n1", "GPU-1", H100)
    g.samples("GPU-1", [*range(20), *range(200, 220)], util=50, pod=P1)  # 38 gaps of 60 s, one of 3 hours
    out = meter(g)
    quality = one(out, "mart_data_quality", node="n1")
    assert (quality["dcgm_interval_seconds"], quality["dcgm_sample_gaps"]) == (60, 39)
    assert holder(out, "p1")["device_seconds"] == D(40 * 60)


# --- R5: holders from DRA --------------------------------------------------------------------


def test_r5_dra_claim_holds_a_whole_gpu_while_its_pod_is_running() -> None:
    """R5: a pod-less series → ResourceSlice device by uuid → the claim's reservedFor pod, at the samples where
    that pod is Running; afterwards (Succeeded) the GPU is free. A claim whose pod is Pending holds nothing."""
    f = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.samples("GPU-1", range(4), util=50)
    f.samples("GPU-2", range(4), util=50)
    f.slice_device("n1", "gpu-0", uuid="GPU-1").slice_device("n1", "gpu-1", uuid="GPU-2")
    f.claim("ns-a", "claim-1", pool="n1", device="gpu-0", reserved_pod="p-dra")
    f.claim("ns-b", "claim-2", pool="n1", device="gpu-1", reserved_pod="p-pending")
    for i in range(4):
        f.pod_phase("ns-a", "p-dra", i, "Running" if i < 2 else "Succeeded")
        f.pod_phase("ns-b", "p-pending", i, "Pending")
    out = meter(f)

    held = holder(out, "p-dra")
    assert (held["device_id"], held["holder_source"], held["tenant"]) == ("GPU-1", "dra", "team-a")
    assert (held["device_seconds"], held["reserved_cost"]) == (D(120), D("0.12"))
    assert rows(out, "mart_device_seconds", pod="p-pending") == []
    assert categories(out) == {"allocated_active": D(120), "free": D(360)}
    assert charges(out) == {("team-a", "reserved"): D("0.12"), (IDLE, "idle"): D("0.36")}


def test_r5_dra_mig_device_by_parent_uuid_and_profile() -> None:
    """R5: a MIG DRA device is found by parentUUID + profile (never by parsing its name)."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="7", profile="3g.40gb")
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="9", profile="1g.10gb")
    f.slice_device("n2", "gpu-0-mig-a", parent_uuid="GPU-M", profile="3g.40gb")
    f.slice_device("n2", "gpu-0-mig-b", parent_uuid="GPU-M", profile="1g.10gb")
    f.claim("ns-b", "claim-mig", pool="n2", device="gpu-0-mig-b", reserved_pod="p-mig")
    for i in range(2):
        f.pod_phase("ns-b", "p-mig", i, "Running")
    out = meter(f)

    held = holder(out, "p-mig")
    assert (held["device_id"], held["mig_profile"], held["holder_source"]) == ("GPU-M/9", "1g.10gb", "dra")
    assert (held["gpu_seconds"], held["reserved_cost"]) == (2 * D("8.571428571429"), D("0.02"))
    assert len(out["mart_device_seconds"]) == 1  # the 3g.40gb instance is free
    # The 3g.40gb (id 7, the first instance) takes the residue of 60 − 60 × 3/7 (uncovered, 25.714285714286) −
    # (25.714285714286 + 8.571428571429) = −0.000000000001 a sample.
    assert categories(out)["free"] == 2 * (D("25.714285714286") - D("0.000000000001"))
    assert categories(out)["mig_unpartitioned"] == 2 * D("25.714285714286")


def test_r5_pod_labels_on_the_series_win_over_a_claim() -> None:
    """R5: a series' own pod labels name the holder even when a Running pod's claim points at the device."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=P1)
    f.slice_device("n1", "gpu-0", uuid="GPU-1")
    f.claim("ns-b", "claim-1", pool="n1", device="gpu-0", reserved_pod="p2")
    for i in range(2):
        f.pod_phase("ns-b", "p2", i, "Running")
    out = meter(f)

    p1 = holder(out, "p1")
    assert (p1["holder_source"], p1["device_seconds"], p1["reserved_cost"]) == ("labels", D(120), D("0.12"))
    assert rows(out, "mart_device_seconds", pod="p2") == []


# --- R6: sharing -----------------------------------------------------------------------------


def test_r6_vgpu_copies_are_one_device_shared_equally() -> None:
    """R6: dcgm-exporter's vgpu copies for 3 pods are one device; each pod gets 1/3 of each sample; the pool
    cost and the capacity count the GPU once."""
    pods = [("ns-a", "p1", "main"), ("ns-a", "p2", "main"), ("ns-b", "p3", "main")]
    f = factory().gpu("n1", "GPU-T", H100)
    for copy, pod in enumerate(pods):
        f.samples("GPU-T", range(2), util=60, energy=1000, pod=pod, vgpu=str(copy))
    out = meter(f)

    for pod in ("p1", "p2", "p3"):
        share = holder(out, pod)
        assert (share["device_seconds"], share["gpu_seconds"]) == (D(40), D(40))  # 2 × 60 / 3
        assert share["reserved_cost"] == D("0.04")  # 2 × 0.06 / 3
        assert share["busy_gpu_seconds"] == D(24)  # 2 × 0.6 × 60 / 3
    assert {r["device_id"] for r in out["mart_device_seconds"].to_pylist()} == {"GPU-T"}
    assert pool_cost(out) == D("0.12")
    assert categories(out) == {"allocated_active": D(120)}
    assert charges(out) == {
        ("team-a", "reserved"): D("0.08"),
        ("team-b", "reserved"): D("0.04"),
        (IDLE, "idle"): D(0),
    }
    assert one(out, "mart_data_quality", node="n1")["max_holder_share_sum"] == pytest.approx(1.0)


# --- R7: tenants -----------------------------------------------------------------------------


def test_r7_label_rule_beats_vcluster_beats_namespace_and_file_order_within_a_kind() -> None:
    """R7: pod label rules, then vCluster, then namespace names/globs; within a kind the first tenant in file
    order wins (even over an exact name later); unmatched holders are __unallocated__, charged and shown."""
    tenants = [
        {"name": "ml", "pod_labels": [{"key": "team", "value": "ml-*"}]},
        {"name": "research", "pod_labels": [{"key": "team", "value": "ml-research"}]},
        {"name": "vc-one", "vclusters": ["vc1"]},
        {"name": "prod-any", "namespaces": ["prod-*"]},
        {"name": "prod-x", "namespaces": ["prod-x"]},
    ]
    vc = "vcluster.loft.sh/managed-by"
    f = factory().gpu("n1", "GPU-1", H100)
    holders = {
        "p-label": ("prod-x", {"team": "ml-research", vc: "vc1"}),
        "p-vc": ("prod-x", {"team": "web", vc: "vc1"}),
        "p-ns": ("prod-x", {}),
        "p-glob": ("prod-y", {}),
        "p-none": ("other", {"team": "web"}),
    }
    for i, (pod, (namespace, labels)) in enumerate(holders.items()):
        f.sample("GPU-1", i, util=50, pod=(namespace, pod, "main"))
        f.pod_labels(namespace, pod, labels)
    out = meter(f, make_config(tenants=tenants))

    resolved = {pod: (holder(out, pod)["tenant"], holder(out, pod)["tenant_rule"]) for pod in holders}
    assert resolved == {
        "p-label": ("ml", "pod_label"),
        "p-vc": ("vc-one", "vcluster"),
        "p-ns": ("prod-any", "namespace"),
        "p-glob": ("prod-any", "namespace"),
        "p-none": (UNALLOCATED, "none"),
    }
    assert charges(out) == {
        ("ml", "reserved"): D("0.06"),
        ("vc-one", "reserved"): D("0.06"),
        ("prod-any", "reserved"): D("0.12"),
        (UNALLOCATED, "reserved"): D("0.06"),
        (IDLE, "idle"): D(0),
    }


def test_r7_a_namespace_handed_over_on_a_date_and_a_day_metered_again_keeps_its_team() -> None:
    """R7, R15: `llm` is team-a's until 2 November and team-b's from then (dated_rules, UTC days). Each day is
    metered with the rules in effect that day, so 1 November metered after the hand-over was configured is
    still team-a's, exactly as with the config it had. By hand: p3 holds an H100 (3.60 an hour) for two
    samples of 60 s a day, 2 × 0.06 = 0.12 a day; a dated pod label rule (team=x, 3 November only) claims p4
    that day only, before every namespace rule."""
    tenants = [
        {"name": "team-a", "namespaces": ["ns-a"], "dated_rules": [
            {"effective_until": "2026-11-02", "namespaces": ["llm"]},
        ]},
        {"name": "team-b", "namespaces": ["ns-b"], "dated_rules": [
            {"effective_from": "2026-11-02", "namespaces": ["llm"]},
            {"effective_from": "2026-11-03", "effective_until": "2026-11-04",
             "pod_labels": [{"key": "team", "value": "x"}]},
        ]},
        {"name": "team-x", "namespaces": ["ns-x"]},
    ]  # fmt: skip

    def day(n: int) -> FactoryBuilder:
        f = factory(DAY + timedelta(days=n)).gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
        f.samples("GPU-1", range(2), util=50, pod=("llm", "p3", "main"))
        f.samples("GPU-2", range(2), util=50, pod=("ns-x", "p4", "main"))
        f.pod_labels("ns-x", "p4", {"team": "x"})
        return f

    config = make_config(tenants=tenants)
    nov1, nov2, nov3, nov4 = (meter(day(n), config) for n in range(4))
    assert (holder(nov1, "p3")["tenant"], holder(nov1, "p3")["tenant_rule"]) == ("team-a", "namespace")
    for out in (nov2, nov3, nov4):
        assert holder(out, "p3")["tenant"] == "team-b"
    assert [holder(out, "p4")["tenant"] for out in (nov1, nov2, nov3, nov4)] == [
        "team-x",
        "team-x",
        "team-b",  # the dated pod label rule, on its one day
        "team-x",
    ]
    assert charges(nov1) == {
        ("team-a", "reserved"): D("0.12"),
        ("team-x", "reserved"): D("0.12"),
        (IDLE, "idle"): D(0),
    }
    assert charges(nov3) == {("team-b", "reserved"): D("0.24"), (IDLE, "idle"): D(0)}
    # 1 November with the config it had before the hand-over was written: the same marts.
    before = make_config(
        tenants=[
            {"name": "team-a", "namespaces": ["ns-a", "llm"]},
            {"name": "team-b", "namespaces": ["ns-b"]},
            {"name": "team-x", "namespaces": ["ns-x"]},
        ]
    )
    assert meter(day(0), before)["mart_tenant_daily_cost"].equals(nov1["mart_tenant_daily_cost"])


# --- R1a: kube-state-metrics scraped by two jobs ------------------------------------------------

KSM_A = ("ksm/10.0.0.1:8080", -20_000)  # target, scrape offset from the DCGM grid
KSM_B = ("ksm-2/10.0.0.2:8080", 10_000)


def test_r1a_kube_state_metrics_scraped_by_two_jobs_bills_each_sample_once() -> None:
    """R1a/R5/R7 with kube-state-metrics scraped by two jobs, A 20 s before the DCGM grid and B 10 s after it,
    B a scrape behind A. GPU-1's pod p1 is relabelled team=ml → team=ops (A shows it from its scrape 5, B from
    its scrape 6); GPU-2 is held through a DRA claim by p-dra (Running at A's scrapes 0-5, at B's 1-6). Each
    GPU sample has one holder and one tenant and is billed once."""
    tenants = [
        {"name": "ml", "pod_labels": [{"key": "team", "value": "ml"}]},
        {"name": "ops", "pod_labels": [{"key": "team", "value": "ops"}]},
        *TENANTS,
    ]
    f = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.samples("GPU-1", range(10), util=50, pod=P1)
    f.samples("GPU-2", range(10), util=50)
    f.slice_device("n1", "gpu-1", uuid="GPU-2")
    f.claim("ns-b", "claim-1", pool="n1", device="gpu-1", reserved_pod="p-dra")
    for lag, (target, offset_ms) in enumerate((KSM_A, KSM_B)):
        for k in range(-1, 10):
            at = {"offset_ms": offset_ms, "target": target}
            f.pod_labels("ns-a", "p1", {"team": "ops" if k >= 5 + lag else "ml"}, k, **at)
            phase = "Pending" if k < lag else "Running" if k <= 5 + lag else "Succeeded"
            f.pod_phase("ns-b", "p-dra", k, phase, **at)
    out = meter(f, make_config(tenants=tenants))

    # By hand: the relabel counts from the first target that shows it, A's scrape 5 (20 s before sample 5):
    # samples 0-4 are ml's, 5-9 ops'. p-dra is Running while either target says so: from A's scrape 0 (20 s
    # before sample 0) until B's scrape 7 (10 s after sample 7) shows it Succeeded: samples 0-7.
    p1 = {r["tenant"]: r["device_seconds"] for r in rows(out, "mart_device_seconds", pod="p1")}
    assert p1 == {"ml": D(300), "ops": D(300)}
    assert holder(out, "p-dra")["device_seconds"] == D(480)
    assert charges(out) == {
        ("ml", "reserved"): D("0.30"),
        ("ops", "reserved"): D("0.30"),
        ("team-b", "reserved"): D("0.48"),
        (IDLE, "idle"): D("0.12"),
    }
    assert categories(out) == {"allocated_active": D(1080), "free": D(120)}
    assert pool_cost(out) == D("1.20")


def dra_held_gpu(samples: range = range(10)) -> FactoryBuilder:
    """GPU-1 on n1, sampled at `samples` (the first 10 by default) at 50 % busy, held through a DRA claim by the
    pod p-dra in ns-b (team-b): kube-state-metrics' phases of p-dra, added by each test, decide for how long."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", samples, util=50)
    f.slice_device("n1", "gpu-0", uuid="GPU-1")
    f.claim("ns-b", "claim-1", pool="n1", device="gpu-0", reserved_pod="p-dra")
    return f


def test_r1a_a_kube_state_metrics_restarted_under_a_new_address_ends_the_old_ones_samples() -> None:
    """R1a with kube-state-metrics restarted between its scrapes 4 and 5 under a new address (a new instance of
    the job `ksm`): the old instance last shows p-dra Running 20 s before sample 4, the new one first scrapes
    5 s before sample 5 and shows it Succeeded. The new instance's first scrape ends what the old one showed,
    as the old one's next scrape would have; the old one's last sample used to hold for the lookback (300 s,
    until 20 s before sample 9), billing the DRA pod 4 samples more."""
    f = dra_held_gpu()
    for k in range(-1, 5):
        f.pod_phase("ns-b", "p-dra", k, "Running", offset_ms=-20_000, target="ksm/10.0.0.1:8080")
    for k in range(5, 10):
        f.pod_phase("ns-b", "p-dra", k, "Succeeded", offset_ms=-5_000, target="ksm/10.0.0.2:8080")
    out = meter(f)

    # By hand: Running from before the day until 5 s before sample 5: samples 0-4, 300 s, 0.30.
    assert holder(out, "p-dra")["device_seconds"] == D(300)
    assert charges(out) == {("team-b", "reserved"): D("0.30"), (IDLE, "idle"): D("0.30")}
    assert categories(out) == {"allocated_active": D(300), "free": D(300)}


def test_r1a_a_restarted_shard_of_kube_state_metrics_ends_only_its_own_samples() -> None:
    """R1a with kube-state-metrics sharded by object, two instances of the job `ksm`: shard 0 (20 s before the
    DCGM grid) shows p0 Running all along; shard 1 shows p1 Running and restarts between its scrapes 4 and 5
    under a new address, first scraped 15 s after sample 5, and shows p1 Running again. The new shard 1 ends
    what the old one showed; shard 0, which ran alongside, ends nothing of it: p1 holds through sample 5 (the
    old shard's last sample stands until the new one's first scrape)."""
    f = factory().gpu("n1", "GPU-0", H100).gpu("n1", "GPU-1", H100, index="1")
    for gpu, pod in (("GPU-0", "p0"), ("GPU-1", "p1")):
        f.samples(gpu, range(10), util=50)
        f.slice_device("n1", f"dev-{gpu}", uuid=gpu)
        f.claim("ns-b", f"claim-{pod}", pool="n1", device=f"dev-{gpu}", reserved_pod=pod)
    for k in range(-1, 10):
        f.pod_phase("ns-b", "p0", k, "Running", offset_ms=-20_000, target="ksm/10.0.0.1:8080")
        shard_1 = ("ksm/10.0.0.2:8080", -20_000) if k <= 4 else ("ksm/10.0.0.3:8080", 15_000)
        f.pod_phase("ns-b", "p1", k, "Running", offset_ms=shard_1[1], target=shard_1[0])
    out = meter(f)

    # By hand: both pods Running from before the day to its end: 10 samples each, 600 s, 0.60.
    assert holder(out, "p0")["device_seconds"] == D(600)
    assert holder(out, "p1")["device_seconds"] == D(600)
    assert charges(out) == {("team-b", "reserved"): D("1.20"), (IDLE, "idle"): D(0)}


def test_r1a_a_kube_state_metrics_rolled_out_with_a_surge_ends_the_old_ones_samples() -> None:
    """R1a with kube-state-metrics rolled out as a Deployment does by default (maxSurge: the new pod runs
    before the old one stops): the new instance of the job `ksm` is first scraped 5 s before sample 4, while
    the old one (20 s before the DCGM grid) still runs; the old one's last scrape, 20 s before sample 5,
    shows p-dra Running, the new one's next, 5 s before sample 5, shows it Succeeded. The new instance's
    first scrape after the old one's last ends what the old one showed; the old one's last sample used to
    hold for the lookback (300 s), since the new instance was first scraped before it."""
    f = dra_held_gpu()
    for k in range(-1, 6):
        f.pod_phase("ns-b", "p-dra", k, "Running", offset_ms=-20_000, target="ksm/10.0.0.1:8080")
    for k in range(4, 10):
        phase = "Running" if k == 4 else "Succeeded"
        f.pod_phase("ns-b", "p-dra", k, phase, offset_ms=-5_000, target="ksm/10.0.0.2:8080")
    out = meter(f)

    # By hand: Running from before the day until 5 s before sample 5: samples 0-4, 300 s, 0.30 (with the
    # old instance's last sample held for 300 s: all 10 samples).
    assert holder(out, "p-dra")["device_seconds"] == D(300)
    assert charges(out) == {("team-b", "reserved"): D("0.30"), (IDLE, "idle"): D("0.30")}
    assert categories(out) == {"allocated_active": D(300), "free": D(300)}


def test_r1a_a_pod_deleted_during_a_surge_rollout_of_kube_state_metrics_ends_there() -> None:
    """R1a, the surge rollout above with p-dra deleted between the old instance's last scrape (20 s before
    sample 5, Running) and the new one's next (5 s before sample 5), which no longer shows it; the new
    instance showed it Running at its first scrape, 5 s before sample 4. A pod it showed and no longer
    shows has ended; p-other, shown by the new instance to the end, keeps its scrapes in the table."""
    f = dra_held_gpu()
    for k in range(-1, 6):
        f.pod_phase("ns-b", "p-dra", k, "Running", offset_ms=-20_000, target="ksm/10.0.0.1:8080")
        f.pod_phase("ns-b", "p-other", k, "Running", offset_ms=-20_000, target="ksm/10.0.0.1:8080")
    for k in range(4, 10):
        if k == 4:
            f.pod_phase("ns-b", "p-dra", k, "Running", offset_ms=-5_000, target="ksm/10.0.0.2:8080")
        f.pod_phase("ns-b", "p-other", k, "Running", offset_ms=-5_000, target="ksm/10.0.0.2:8080")
    out = meter(f)

    # By hand: Running until 5 s before sample 5: samples 0-4, 300 s (held for 300 s: all 10 samples).
    assert holder(out, "p-dra")["device_seconds"] == D(300)
    assert charges(out) == {("team-b", "reserved"): D("0.30"), (IDLE, "idle"): D("0.30")}


def test_r1a_a_kube_state_metrics_restarted_in_the_day_s_last_lookback_ends_what_the_new_one_no_longer_shows() -> (
    None
):
    """R1a with kube-state-metrics restarted under a new address in the day's last 300 s (the lookback), with no
    surge: the old instance last scrapes 20 s before sample 1436 (23:55:40), showing p-dra and p-other Running;
    the new one first scrapes 5 s before sample 1437 and shows p-other only (p-dra was deleted meanwhile). The
    old instance may still be scraped after midnight, unseen, and a new instance could be a shard of other
    objects; but this one shows a series the old one showed (p-other): it is the old one restarted, and its
    first scrape ends what the old one showed. p-dra's last sample used to hold to the day's end."""
    f = dra_held_gpu(range(1430, 1440))
    for k in range(1420, 1437):
        for pod in ("p-dra", "p-other"):
            f.pod_phase("ns-b", pod, k, "Running", offset_ms=-20_000, target="ksm/10.0.0.1:8080")
    for k in range(1437, 1440):
        f.pod_phase("ns-b", "p-other", k, "Running", offset_ms=-5_000, target="ksm/10.0.0.2:8080")
    out = meter(f)

    # By hand: Running until 5 s before sample 1437: samples 1430-1436, 420 s, 0.42 (held to the day's end:
    # samples 1430-1439, 600 s).
    assert holder(out, "p-dra")["device_seconds"] == D(420)
    assert charges(out) == {("team-b", "reserved"): D("0.42"), (IDLE, "idle"): D("0.18")}


def test_r1a_a_new_shard_of_kube_state_metrics_in_the_day_s_last_lookback_ends_nothing() -> None:
    """R1a, the day's last lookback as above, but the new instance of the job is a shard of other objects: it
    shows p-new only, a pod the old instance never showed. The old instance may still be scraped after
    midnight; what it last showed (p-dra Running) holds, for the lookback, to the day's end."""
    f = dra_held_gpu(range(1430, 1440))
    for k in range(1420, 1437):
        f.pod_phase("ns-b", "p-dra", k, "Running", offset_ms=-20_000, target="ksm/10.0.0.1:8080")
    for k in range(1437, 1440):
        f.pod_phase("ns-b", "p-new", k, "Running", offset_ms=-5_000, target="ksm/10.0.0.2:8080")
    out = meter(f)

    # By hand: samples 1430-1439, 600 s, 0.60.
    assert holder(out, "p-dra")["device_seconds"] == D(600)
    assert charges(out) == {("team-b", "reserved"): D("0.60"), (IDLE, "idle"): D(0)}


def test_r1a_a_kube_state_metrics_job_removed_leaves_the_other_jobs_reading() -> None:
    """R1a with kube-state-metrics scraped by two jobs, A (20 s before the DCGM grid) and B (10 s after), and
    A's job removed after its scrape 5: A last shows p-dra Running 20 s before sample 5, B shows it Running
    10 s after sample 4 and Succeeded 10 s after sample 5. B's next scrape ends what A last showed; A's
    last sample used to hold for the lookback, whatever B said."""
    f = dra_held_gpu()
    for k in range(-1, 10):
        phase = "Running" if k <= 4 else "Succeeded"
        if k <= 5:
            f.pod_phase("ns-b", "p-dra", k, "Running", offset_ms=KSM_A[1], target=KSM_A[0])
        f.pod_phase("ns-b", "p-dra", k, phase, offset_ms=KSM_B[1], target=KSM_B[0])
    out = meter(f)

    # By hand: Running from before the day until B's scrape 10 s after sample 5 shows it Succeeded (A's last
    # Running, 20 s before sample 5, stands until then): samples 0-5, 360 s, 0.36.
    assert holder(out, "p-dra")["device_seconds"] == D(360)
    assert charges(out) == {("team-b", "reserved"): D("0.36"), (IDLE, "idle"): D("0.24")}


def test_r4_expected_capacity_counts_each_moment_once_when_two_targets_report_a_node() -> None:
    """R4 coverage with kube-state-metrics scraped by two jobs (n1: A and B at every scrape) and with a
    restarted exporter (n3: an old target until scrape 4, a new one from scrape 4 on, 25 s later): each moment
    of the day is expected once, at the node's GPU count (both targets' time used to be added)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(10), util=50, pod=P1)
    for k in range(-1, 10):
        for target, offset_ms in (KSM_A, KSM_B):
            f.node_state("n1", k, gpus=2, offset_ms=offset_ms, target=target)
        if k <= 4:
            f.node_state("n3", k, gpus=4, offset_ms=-20_000, target="ksm/10.0.0.3:8080")
        if k >= 4:
            f.node_state("n3", k, gpus=4, offset_ms=5_000, target="ksm/10.0.0.4:8080")
    out = meter(f)

    # By hand: n1 is reported from before midnight until B's last scrape (10 s after sample 9, 550 s) stands
    # for Δ: 610 s × 2 GPUs (A alone: 580 s; both added: 1,190 s). n3: the old target until the new one's
    # first scrape (245 s), the new one until its last (545 s) + Δ: 605 s × 4 GPUs (alone, the old target's
    # last scrape, 220 s, would stand until 280 s).
    n1 = one(out, "mart_data_quality", node="n1")
    assert (n1["observed_gpu_seconds"], n1["expected_gpu_seconds"], n1["expected_gpus"]) == (600, 1220, 2)
    assert n1["unobserved_gpu_seconds"] == 620
    n3 = one(out, "mart_data_quality", node="n3")
    assert (n3["expected_gpu_seconds"], n3["unobserved_gpu_seconds"]) == (2420, 2420)
    assert pool_cost(out) == D("0.60")


def test_r4_a_node_added_and_a_node_removed_during_the_day_are_expected_only_while_they_exist() -> None:
    """R4 and R1a on a pool that an autoscaler grows and shrinks: n2 joins at 10:00, n3 is cordoned at 16:00,
    drained and removed at 18:00 (kube-state-metrics' scrape at 18:00 no longer shows it). Each GPU is
    capacity, expected and billed only while its node exists; nothing is unobserved."""
    day = 1_440  # samples of the day at Δ = 60 s
    joins, cordoned, removed, drained = 600, 960, 1_080, 900  # 10:00, 16:00, 18:00, 15:00
    f = factory().gpu("n1", "GPU-1", H100).gpu("n2", "GPU-2", H100).gpu("n3", "GPU-3", H100)
    f.samples("GPU-1", range(day), util=0)
    f.samples("GPU-2", range(joins, day), util=0, pod=P2)
    f.samples("GPU-3", range(drained), util=50, pod=P1)
    f.samples("GPU-3", range(drained, removed), util=0)
    for k in range(-1, day):  # kube-state-metrics scraped every 30 s, on and between the DCGM grid
        for offset_ms in (0, 30_000):
            f.node_state("n1", k, gpus=1, offset_ms=offset_ms)
            if k >= joins:
                f.node_state("n2", k, gpus=1, offset_ms=offset_ms)
            if k < removed:
                f.node_state("n3", k, gpus=1, cordoned=k >= cordoned, offset_ms=offset_ms)
    out = meter(f)

    # By hand: n1 all day, 86,400 s; n2 from 10:00, 50,400 s; n3 until kube-state-metrics' scrape at 18:00
    # stops showing it, 64,800 s (its last sample at 17:59:30 would stand until 18:00:30 for Δ, and longer
    # for the lookback). Observed the same.
    for node, seconds in (("n1", 86_400), ("n2", 50_400), ("n3", 64_800)):
        quality = one(out, "mart_data_quality", node=node)
        assert (quality["observed_gpus"], quality["expected_gpus"]) == (1, 1), node
        assert (quality["observed_gpu_seconds"], quality["expected_gpu_seconds"]) == (seconds, seconds), node
        assert quality["unobserved_gpu_seconds"] == 0, node
    # 201,600 GPU-seconds at 3.60 an hour: 201.60. team-a held GPU-3 until 15:00 (54,000 s: 54.00), team-b
    # GPU-2 from 10:00 (50,400 s: 50.40); idle 201.60 - 104.40 = 97.20.
    assert pool_cost(out) == D("201.60")
    assert charges(out) == {
        ("team-a", "reserved"): D("54.00"),
        ("team-b", "reserved"): D("50.40"),
        (IDLE, "idle"): D("97.20"),
    }
    # n3: held until 15:00, free and schedulable for an hour, free on a cordoned node until it is removed.
    assert categories(out, "n3") == {
        "allocated_active": D(54_000),
        "free": D(3_600),
        "unschedulable": D(7_200),
    }
    assert categories(out, "n2") == {"allocated_idle": D(50_400)}
    assert categories(out, "n1") == {"free": D(86_400)}


# --- R9: idle --------------------------------------------------------------------------------


def two_tenants_on_h100(f: FactoryBuilder) -> FactoryBuilder:
    """GPU-1 held by team-a for 1 sample, GPU-2 by team-b for 2, both observed 4 samples: pool 0.48."""
    f.gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    for i in range(4):
        f.sample("GPU-1", i, util=50, pod=P1 if i < 1 else None)
        f.sample("GPU-2", i, util=50, pod=P2 if i < 2 else None)
    return f


def test_r9_platform_idle_is_pool_minus_every_holder_charge() -> None:
    """R9 (idle_policy: platform): __idle__ = pool cost − all holder charges, __unallocated__ included."""
    f = two_tenants_on_h100(factory())
    f.sample("GPU-1", 4, util=50, pod=("unmapped", "p9", "main"))
    out = meter(f)
    assert pool_cost(out) == D("0.54")
    assert charges(out) == {
        ("team-a", "reserved"): D("0.06"),
        ("team-b", "reserved"): D("0.12"),
        (UNALLOCATED, "reserved"): D("0.06"),
        (IDLE, "idle"): D("0.30"),
    }


def test_r9_proportional_idle_spreads_by_reserved_charge() -> None:
    """R9 (idle_policy: proportional): idle 0.30 spread 1:2 as idle_share lines; no __idle__ is left."""
    out = meter(two_tenants_on_h100(factory()), make_config(idle_policy="proportional"))
    assert charges(out) == {
        ("team-a", "reserved"): D("0.06"),
        ("team-b", "reserved"): D("0.12"),
        ("team-a", "idle_share"): D("0.10"),  # 0.30 × 0.06/0.18
        ("team-b", "idle_share"): D("0.20"),  # 0.30 × 0.12/0.18
    }
    share = one(out, "mart_tenant_daily_cost", tenant="team-a", charge_type="idle_share")
    assert share["gpu_seconds"] == D(100)  # 300 idle GPU-seconds × 1/3


def test_r9_proportional_idle_parts_sum_exactly() -> None:
    """R9/R13: 0.05 of idle over three equal holders: 0.016666666667 twice, the last in name order takes the
    remainder 0.016666666666, and the parts sum to 0.05 exactly."""
    price_3 = {"model": "H100-80GB", "aliases": [H100], "price_per_gpu_hour": 3.0}  # 0.05 a sample
    config = make_config(
        rate_card={"models": [price_3]},
        idle_policy="proportional",
        tenants=[{"name": n, "namespaces": [n]} for n in ("t1", "t2", "t3")],
    )
    f = factory().gpu("n1", "GPU-1", H100)
    for i, namespace in enumerate(("t1", "t2", "t3")):
        f.sample("GPU-1", i, util=50, pod=(namespace, f"p{i}", "main"))
    f.sample("GPU-1", 3, util=0)
    out = meter(f, config)
    assert {k: v for k, v in charges(out).items() if k[1] == "idle_share"} == {
        ("t1", "idle_share"): D("0.016666666667"),
        ("t2", "idle_share"): D("0.016666666667"),
        ("t3", "idle_share"): D("0.016666666666"),
    }
    assert pool_cost(out) == D("0.20")


def test_r9_proportional_keeps_idle_of_a_model_nobody_held() -> None:
    """R9 (proportional, per GPU model): an A100 nobody held keeps its idle as __idle__."""
    f = two_tenants_on_h100(factory()).gpu("n2", "GPU-A", A100)
    f.samples("GPU-A", range(2), util=0)
    out = meter(f, make_config(idle_policy="proportional"))
    idle = one(out, "mart_tenant_daily_cost", tenant=IDLE)
    assert (idle["gpu_model"], idle["amount"], idle["gpu_seconds"]) == ("A100-80GB", D("0.14"), D(120))
    assert charges(out)[("team-b", "idle_share")] == D("0.20")


# --- R10: utilization, memory, energy --------------------------------------------------------


def test_r10_busy_prefers_gr_engine_active_and_clamps() -> None:
    """R10: busy = GR_ENGINE_ACTIVE where present (0.8 beats GPU_UTIL 30 %), else GPU_UTIL/100 (0.3), clamped to
    [0, 1] (1.2 → 1, −0.1 → 0, 150 % → 1). Efficiency = used / held."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, gr=0.8, util=30, fb=1000, pod=P1)
    f.sample("GPU-1", 1, util=30, fb=3000, pod=P1)
    f.sample("GPU-1", 2, gr=1.2, pod=P1)
    f.sample("GPU-1", 3, gr=-0.1, pod=P1)
    f.sample("GPU-1", 4, util=150, pod=P1)
    out = meter(f)
    p1 = holder(out, "p1")
    assert p1["busy_gpu_seconds"] == D(186)  # 60 × (0.8 + 0.3 + 1 + 0 + 1)
    assert p1["gpu_seconds"] == D(300)
    assert p1["busy_gpu_seconds"] / p1["gpu_seconds"] == D("0.62")  # efficiency
    assert p1["peak_busy"] == 1.0
    assert (p1["fb_used_mib_seconds"], p1["peak_fb_used_mib"]) == (D(240_000), 3000)  # 60 × (1000 + 3000)
    assert categories(out) == {"allocated_active": D(240), "allocated_idle": D(60)}  # the −0.1 sample


def test_r10_vgpu_copies_that_disagree_keep_the_largest_and_are_reported() -> None:
    """R6, R10: two vgpu copies of one sample say 2 % and 80 %: the device is busy 0.8 (the largest, whatever
    the row order), and data_quality counts the sample as conflicting — never resolved silently. Copies that
    agree are not reported."""
    f = factory().gpu("n1", "GPU-T", H100)
    f.sample("GPU-T", 0, util=2, pod=("ns-a", "p1", "main"), vgpu="0")
    f.sample("GPU-T", 0, util=80, pod=("ns-a", "p2", "main"), vgpu="1")
    f.sample("GPU-T", 1, util=50, pod=("ns-a", "p1", "main"), vgpu="0")
    f.sample("GPU-T", 1, util=50, pod=("ns-a", "p2", "main"), vgpu="1")
    out = meter(f)
    assert holder(out, "p1")["busy_gpu_seconds"] == D(39)  # (0.8 + 0.5) × 60 / 2
    assert one(out, "mart_data_quality", node="n1")["conflicting_copy_samples"] == 1


def test_r10_a_mig_instance_without_frame_buffer_takes_its_gpus_by_weight() -> None:
    """R10 (TELEMETRY: FB may be missing per MIG instance on H100): an instance series without FB_USED takes
    its GPU's reading × its weight (3g.40gb on A100-80GB: 3/7 of 7000 MiB = 3000 MiB); one with its own keeps
    it."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.samples("GPU-M", range(2), fb=7000)  # the GPU-level series
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=P1)
    f.samples("GPU-M", range(2), gr=0.5, fb=500, gpu_i_id="2", profile="3g.40gb", pod=P2)
    out = meter(f)
    assert (holder(out, "p1")["peak_fb_used_mib"], holder(out, "p1")["fb_used_mib_seconds"]) == (
        3000,
        D(360_000),
    )
    assert holder(out, "p2")["peak_fb_used_mib"] == 500


def test_r10_energy_counter_with_a_reset() -> None:
    """R10: energy is the counter's step (mJ) since the previous sample, the lookback sample before midnight
    included; a step down is a reset and the new value is what accrued since: 30 + 60 + 5 + 15 J."""
    f = factory().gpu("n1", "GPU-1", H100)
    counter = {-1: 1_000_000, 0: 1_030_000, 1: 1_090_000, 2: 5_000, 3: 20_000}
    for i, millijoules in counter.items():
        f.sample("GPU-1", i, util=50, energy=millijoules, pod=P1)
    out = meter(f)
    p1 = holder(out, "p1")
    assert p1["energy_joules"] == D(110)
    assert p1["device_seconds"] == D(240)  # the lookback sample is context, not the day's


def test_r10_mig_energy_is_the_gpus_apportioned_by_weight() -> None:
    """R10: a MIG instance's energy is its GPU's (GPU-level series) × its weight: 70 J a sample → 30 J for a
    3g, 10 J for a 1g; the unpartitioned part's energy is nobody's."""
    f = factory().gpu("n2", "GPU-M", A100)
    for i, millijoules in {-1: 0, 0: 70_000, 1: 140_000}.items():
        f.sample("GPU-M", i, energy=millijoules)
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=P1)
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="2", profile="1g.10gb", pod=P2)
    out = meter(f)
    assert holder(out, "p1")["energy_joules"] == D(60)
    assert holder(out, "p2")["energy_joules"] == D(20)


def test_r10_mig_energy_in_flex_mode_is_the_reading_the_instances_repeat() -> None:
    """R3/R10: dcgm-exporter's default flex mode watches a MIG GPU only through its instances, each repeating
    the GPU's energy counter: the GPU's energy is that reading, once per sample (70 J a sample, never 140), and
    each instance gets its weight's part: 30 J for the 3g, 10 J for the 1g a sample."""
    f = factory().gpu("n2", "GPU-M", A100)
    for i, millijoules in {-1: 0, 0: 70_000, 1: 140_000}.items():
        f.sample("GPU-M", i, gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=P1, energy=millijoules)
        f.sample("GPU-M", i, gr=0.5, gpu_i_id="2", profile="1g.10gb", pod=P2, energy=millijoules)
    out = meter(f)
    assert holder(out, "p1")["energy_joules"] == D(60)
    assert holder(out, "p2")["energy_joules"] == D(20)


# --- R11: where capacity goes ----------------------------------------------------------------


def test_r11_allocated_active_and_idle_by_threshold() -> None:
    """R11: held with busy ≥ idle_threshold (0.05) is allocated_active, below it (or with no utilization series)
    allocated_idle; a higher threshold moves samples to idle."""
    f = factory()
    for n, busy in enumerate((0.5, 0.05, 0.04, None)):
        uuid = f"GPU-{n}"
        f.gpu("n1", uuid, H100, index=str(n))
        f.sample(uuid, 0, gr=busy, pod=("ns-a", f"p{n}", "main"))
    out = meter(f)
    assert categories(out) == {"allocated_active": D(120), "allocated_idle": D(120)}
    out = meter(f, make_config(idle_threshold=0.6))
    assert categories(out) == {"allocated_idle": D(240)}


def test_r11_free_gpus_are_free_or_unschedulable() -> None:
    """R11: a free GPU is unschedulable on a cordoned node, a NotReady node, or one whose CPU requests leave less
    than min_free_cpu_cores (1.0); else free. A held GPU on a cordoned node stays allocated."""
    f = factory()
    nodes = {
        "n-ok": dict(allocatable_cpu=32, requested_cpu=4),
        "n-cordoned": dict(cordoned=True),
        "n-notready": dict(ready=False),
        "n-full": dict(allocatable_cpu=8, requested_cpu=7.5),
    }
    for n, (node, state) in enumerate(nodes.items()):
        f.gpu(node, f"GPU-{n}", H100)
        f.samples(f"GPU-{n}", range(2), util=0)
        for i in range(-1, 2):  # the lookback sample describes sample 0 (latest state at or before it)
            f.node_state(node, i, **state)
    f.gpu("n-cordoned", "GPU-held", H100, index="1")
    f.samples("GPU-held", range(2), util=50, pod=P1)
    out = meter(f)
    assert categories(out, "n-ok") == {"free": D(120)}
    assert categories(out, "n-cordoned") == {"unschedulable": D(120), "allocated_active": D(120)}
    assert categories(out, "n-notready") == {"unschedulable": D(120)}
    assert categories(out, "n-full") == {"unschedulable": D(120)}


def test_r11_a_node_reported_by_two_kube_state_metrics_targets_is_unschedulable_once() -> None:
    """R11 with kube-state-metrics scraped by two jobs (20 s and 13 s before the DCGM grid): target A says the
    node is cordoned at scrapes 0-4, target B at scrapes 3-7. The node is unschedulable while either says so,
    and each GPU sample counts once (their overlapping spans used to meet a sample twice and bill it twice)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(10), util=0)
    for k in range(-1, 10):
        f.node_state("n1", k, cordoned=0 <= k <= 4, offset_ms=-20_000, target="ksm/10.0.0.1:8080")
        f.node_state("n1", k, cordoned=3 <= k <= 7, offset_ms=-13_000, target="ksm-2/10.0.0.1:8080")
    out = meter(f)
    # By hand: A's cordon holds from 20 s before scrape 0 until A's scrape 5 (20 s before sample 5), B's from
    # 13 s before sample 3 until 13 s before sample 8: samples 0-7 are unschedulable, 8 and 9 free.
    # 10 samples × 60 s at 3.60 an hour: 0.60 of pool cost.
    assert categories(out, "n1") == {"unschedulable": D(480), "free": D(120)}
    pool = one(out, "mart_pool_daily_cost", node="n1")
    assert (pool["gpu_samples"], pool["pool_cost"]) == (10, D("0.60"))


def test_r11_a_node_uncordoned_during_a_surge_rollout_of_kube_state_metrics_is_free_from_then() -> None:
    """R11 and R1a with kube-state-metrics rolled out with a surge: the old instance (20 s before the DCGM
    grid) says the node is cordoned up to its last scrape, 20 s before sample 5; the new one, scraped from
    5 s before sample 4, says it is cordoned then and no longer 5 s before sample 5. The node's state from the
    old instance ends where the new one takes its series over, as a pod's phase does; it used to hold for the
    lookback (300 s), keeping the free GPU unschedulable to the end of the samples."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(10), util=0)
    for k in range(-1, 6):
        f.node_state("n1", k, cordoned=True, offset_ms=-20_000, target="ksm/10.0.0.1:8080")
    for k in range(4, 10):
        f.node_state("n1", k, cordoned=k == 4, offset_ms=-5_000, target="ksm/10.0.0.2:8080")
    out = meter(f)
    # By hand: cordoned until 5 s before sample 5: samples 0-4 unschedulable (300 s), 5-9 free (300 s).
    assert categories(out, "n1") == {"unschedulable": D(300), "free": D(300)}


def test_r11_a_pod_request_reported_by_two_kube_state_metrics_targets_is_requested_once() -> None:
    """R11 "no room for another GPU pod" with kube-state-metrics scraped by two jobs: a pod's CPU request that
    both targets report is requested once. 8 cores allocatable, 6 requested: 2 free, room for a GPU pod (the
    two targets' requests used to be added: 12 requested, the free GPU unschedulable)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(4), util=0)
    for k in range(-1, 4):
        for target, offset_ms in (KSM_A, KSM_B):
            f.node_state("n1", k, allocatable_cpu=8, requested_cpu=6, offset_ms=offset_ms, target=target)
    out = meter(f)
    assert categories(out, "n1") == {"free": D(240)}


def test_r11_xid_makes_a_gpu_unhealthy_held_or_free() -> None:
    """R11: a GPU reporting an XID error is unhealthy at that sample, held or free; a MIG GPU's XID (on its
    GPU-level series) makes its instances and its unpartitioned remainder unhealthy too."""
    f = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.sample("GPU-1", 0, util=90, pod=P1)
    f.sample("GPU-1", 1, util=90, xid=79, pod=P1)
    f.sample("GPU-2", 0, util=0, xid=43)
    mig_gpu(f)
    f.sample("GPU-M", 1, xid=48)
    out = meter(f)
    assert categories(out, "n1") == {"allocated_active": D(60), "unhealthy": D(120)}
    assert holder(out, "p1", device_id="GPU-1")["reserved_cost"] == D("0.12")  # still charged to its holder
    assert categories(out, "n2") == {
        # As in test_r3_mig_compute_weights_and_unpartitioned_remainder, at the healthy sample.
        "allocated_active": D("25.714285714286") + D("17.142857142857") - D("0.000000000001"),
        "free": D("8.571428571429"),
        "mig_unpartitioned": D("8.571428571429"),
        "unhealthy": D(60),
    }


def test_r11_categories_sum_to_capacity_exactly_on_a_mixed_pool() -> None:
    """R11/R13: active, idle, free, unschedulable, unhealthy and MIG on one pool: the categories add up to
    observed capacity and the charges to the pool cost, exactly."""
    f = mig_gpu(factory())
    f.gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1").gpu("n1", "GPU-3", H100, index="2")
    f.samples("GPU-1", range(3), gr=0.7, pod=P1)
    f.samples("GPU-2", range(3), gr=0.01, pod=P2)
    f.samples("GPU-3", range(3), util=0, xid=31)
    f.gpu("n-cordoned", "GPU-4", H100)
    f.samples("GPU-4", range(3), util=0)
    for i in range(3):
        f.node_state("n-cordoned", i, cordoned=True)
    out = meter(f)  # meter() asserts Σ categories == observed and Σ charges == pool cost
    parts = categories(out)
    # p1's 3g.40gb takes the MIG GPU's rounding residue, as in test_r3_mig_compute_weights_and_unpartitioned_remainder.
    assert parts["allocated_active"] == D(180) + 2 * (
        D("25.714285714286") + D("17.142857142857") - D("1E-12")
    )
    assert (parts["allocated_idle"], parts["unhealthy"], parts["unschedulable"]) == (D(180), D(180), D(180))
    assert sum(parts.values(), D(0)) == D(840)  # 12 H100 samples + 2 A100 samples
    assert pool_cost(out) == D("0.86")  # 12 × 0.06 + 2 × 0.07


# --- R2: period membership -------------------------------------------------------------------


def test_r2_days_are_half_open() -> None:
    """R2: a sample at day_start belongs to the day; one at exactly day_end belongs to the next day; the
    lookback before midnight belongs to the day before."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", [-1, 0, f.samples_per_day - 1, f.samples_per_day], util=50, pod=P1)
    today = meter(f)
    assert holder(today, "p1")["device_seconds"] == D(120)  # indices 0 and last

    raw = f.build()
    tomorrow = meter_day(raw, make_config(), "c1", DAY + timedelta(days=1))
    assert one(tomorrow, "mart_device_seconds", pod="p1")["device_seconds"] == D(60)  # exactly midnight
    assert pool_cost(tomorrow) == D("0.06")


# --- R8: bad input ---------------------------------------------------------------------------


def test_r8_model_without_a_price_is_an_error_naming_model_and_node() -> None:
    """R8: a device whose price cannot be resolved stops the run, naming the model and the node."""
    f = factory().gpu("n1", "GPU-1", H100).gpu("n9", "GPU-9", "NVIDIA L4")
    f.sample("GPU-1", 0, util=50).sample("GPU-9", 0, util=50)
    with pytest.raises(AccountingError, match=r"'NVIDIA L4' on node 'n9'"):
        meter_day(f.build(), make_config(), "c1", DAY)


def test_r8_rate_card_model_with_no_price_is_an_error() -> None:
    """R8: a rate-card model without price_per_gpu_hour is never a silent zero."""
    config = make_config(rate_card={"models": [{"model": "H100-80GB", "aliases": [H100]}]})
    f = factory().gpu("n1", "GPU-1", H100).sample("GPU-1", 0, util=50)
    with pytest.raises(AccountingError, match=r"NVIDIA H100 80GB HBM3.*no price_per_gpu_hour"):
        meter_day(f.build(), config, "c1", DAY)
    # Priced from 15 November on only: 1 November has no price, and the error says from when it has one.
    later = {"effective_from": "2026-11-15", "price_per_gpu_hour": 3.6}
    config = make_config(
        rate_card={"models": [{"model": "H100-80GB", "aliases": [H100], "price_changes": [later]}]}
    )
    with pytest.raises(
        AccountingError, match=r"no price_per_gpu_hour on 2026-11-01 \(its price_changes start 2026-11-15\)"
    ):
        meter_day(f.build(), config, "c1", DAY)


def test_r5_r6_shared_dra_claim_splits_between_its_running_pods() -> None:
    """R5/R6: a claim reserved for two Running pods shares its device 1/2 each; once one pod stops, the other
    holds it whole. A DRA holder's tenant comes from its pod labels like any holder's (R7)."""
    config = make_config(tenants=[*TENANTS, {"name": "ml", "pod_labels": [{"key": "team", "value": "ml"}]}])
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50)
    f.slice_device("n1", "gpu-0", uuid="GPU-1")
    f.claim("ns-a", "shared", pool="n1", device="gpu-0", reserved_pod="w1")
    f.claim("ns-a", "shared", pool="n1", device="gpu-0", reserved_pod="w2")
    f.pod_labels("ns-a", "w2", {"team": "ml"})
    for i in range(2):
        f.pod_phase("ns-a", "w1", i, "Running")
        f.pod_phase("ns-a", "w2", i, "Running" if i == 0 else "Failed")
    out = meter(f, config)
    w1, w2 = holder(out, "w1"), holder(out, "w2")
    assert (w1["device_seconds"], w1["reserved_cost"], w1["tenant"]) == (D(90), D("0.09"), "team-a")
    assert (w2["device_seconds"], w2["reserved_cost"], w2["tenant"]) == (D(30), D("0.03"), "ml")
    assert charges(out)[(IDLE, "idle")] == D(0)


# --- R8: price_source: opencost ------------------------------------------------------------------


def opencost_price(f: FactoryBuilder, node: str, ts_index: int, price: float) -> None:
    f._kube_row(ts_index, "node_gpu_hourly_cost", price, {"node": node, "instance_type": "p5.48xlarge"})


def test_opencost_prices_are_time_weighted_per_node_r8() -> None:
    """# R8: node_gpu_hourly_cost per node at each sample; the price changes half-way through."""
    f = factory()
    f.gpu("n1", "GPU-1", H100)
    for i in range(4):
        opencost_price(f, "n1", i, 3.6 if i < 2 else 7.2)
        f.sample("GPU-1", i, util=50, pod=P1)
    config = make_config(rate_card={"price_source": "opencost", "models": []})
    out = meter(f, config)
    # 2 samples × 60 s at 3.6/h + 2 at 7.2/h = 0.12 + 0.24
    assert one(out, "mart_pool_daily_cost")["pool_cost"] == D("0.36")
    assert one(out, "mart_device_seconds")["reserved_cost"] == D("0.36")
    assert rows(out, "mart_tenant_daily_cost", tenant=IDLE)[0]["amount"] == D(0)


def test_opencost_mig_instance_weighs_the_node_price_r8() -> None:
    """# R3 R8: a 3g.40gb instance costs 3/7 of the node's GPU price."""
    f = factory()
    f.gpu("n1", "GPU-1", A100)
    opencost_price(f, "n1", 0, 7.0)
    f.sample("GPU-1", 0, gpu_i_id="1", profile="3g.40gb", gr=0.5, pod=P1)
    out = meter(f, make_config(rate_card={"price_source": "opencost", "models": []}))
    assert one(out, "mart_device_seconds")["reserved_cost"] == D("0.05")  # 60/3600 × 3/7 × 7.0
    assert one(out, "mart_pool_daily_cost")["pool_cost"] == D("0.116666666667")


def test_opencost_without_a_price_sample_names_model_and_node_r8() -> None:
    f = factory()
    f.gpu("n7", "GPU-1", H100)
    f.sample("GPU-1", 0, util=50, pod=P1)
    with pytest.raises(AccountingError, match=r"'NVIDIA H100 80GB HBM3' on node 'n7' has no price"):
        meter_day(f.build(), make_config(rate_card={"price_source": "opencost", "models": []}), "c1", DAY)


# --- R6: share: requested (HAMi gpucores) ------------------------------------------------------


def gpucores(f: FactoryBuilder, pod: tuple[str, str, str], percent: float, ts_index: int = 0) -> None:
    namespace, name, container = pod
    f._kube_row(
        ts_index,
        "kube_pod_container_resource_requests",
        percent,
        {"namespace": namespace, "pod": name, "container": container, "resource": "nvidia_com_gpucores"},
    )


def time_sliced(pods: list[tuple[str, str, str]]) -> FactoryBuilder:
    f = factory().gpu("n1", "GPU-T", H100)
    for copy, pod in enumerate(pods):
        f.samples("GPU-T", range(2), util=60, pod=pod, vgpu=str(copy))
    return f


def test_r6_share_requested_uses_declared_fractions_and_leaves_the_rest_idle() -> None:
    """R6 share: requested: 30 % + 50 % of the GPU; the undeclared 20 % is unheld and lands in __idle__."""
    f = time_sliced([P1, P2])
    gpucores(f, P1, 30)
    gpucores(f, P2, 50)
    out = meter(f, make_config(share="requested"))
    assert holder(out, "p1")["device_seconds"] == D(36)  # 2 × 60 × 0.3
    assert holder(out, "p2")["device_seconds"] == D(60)  # 2 × 60 × 0.5
    assert holder(out, "p1")["reserved_cost"] == D("0.036")
    assert charges(out)[(IDLE, "idle")] == D("0.024")  # 0.12 × 0.2
    assert one(out, "mart_data_quality", node="n1")["max_holder_share_sum"] == pytest.approx(0.8)


def test_r6_share_requested_overcommitted_is_proportional_and_undeclared_falls_back_to_equal() -> None:
    """R6: 80 % + 120 % (sum 2) splits 40/60; a holder without a declaration makes the sample equal."""
    f = time_sliced([P1, P2])
    gpucores(f, P1, 80)
    gpucores(f, P2, 120)
    out = meter(f, make_config(share="requested"))
    assert (holder(out, "p1")["device_seconds"], holder(out, "p2")["device_seconds"]) == (D(48), D(72))
    assert charges(out)[(IDLE, "idle")] == D(0)

    f = time_sliced([P1, P2])
    gpucores(f, P1, 80)  # p2 declares nothing
    out = meter(f, make_config(share="requested"))
    assert (holder(out, "p1")["device_seconds"], holder(out, "p2")["device_seconds"]) == (D(60), D(60))


def test_r6_share_requested_a_pod_alone_holds_its_declared_fraction() -> None:
    """R6 share: requested, one pod alone on its GPU: 30 % declared holds 0.3 of it (the rest is idle); 110 %
    declared holds the whole GPU, no more. The day's unit of money must divide both shares exactly (R12)."""
    f = time_sliced([P1])
    gpucores(f, P1, 30)
    out = meter(f, make_config(share="requested"))
    assert holder(out, "p1")["device_seconds"] == D(36)  # 2 × 60 × 0.3
    assert holder(out, "p1")["reserved_cost"] == D("0.036")  # 36 s at 3.60 per hour
    assert charges(out)[(IDLE, "idle")] == D("0.084")  # 0.12 × 0.7

    f = time_sliced([P1])
    gpucores(f, P1, 110)
    out = meter(f, make_config(share="requested"))
    assert holder(out, "p1")["device_seconds"] == D(120)  # 2 × 60 × 1.1 / 1.1
    assert holder(out, "p1")["reserved_cost"] == D("0.12")
    assert charges(out)[(IDLE, "idle")] == D(0)


def test_r6_share_equal_ignores_declarations() -> None:
    f = time_sliced([P1, P2])
    gpucores(f, P1, 30)
    gpucores(f, P2, 50)
    out = meter(f)
    assert (holder(out, "p1")["device_seconds"], holder(out, "p2")["device_seconds"]) == (D(60), D(60))
