"""Tariffs (R9 reserved, R10 used, hybrid), idle policies under each, and energy lines (R10, R14), on
hand-computed days (docs/tariffs.md). Conventions of tests/test_rules.py: Δ = 60 s; H100 3.60/GPU-hour, so
0.06 a sample; A100-80GB 4.20/GPU-hour, 0.07 a sample. `meter` also checks R13 on every case.

The shared day (`shared_day`): one H100, 20 samples.
- samples 0-9: p1 (team-a), util 50 %   -> reserved 10 × 0.06 = 0.60, used 10 × 0.06 × 0.5 = 0.30
- samples 10-14: p2 (team-b), util 100 % -> reserved 5 × 0.06 = 0.30, used 0.30
- samples 15-19: nobody                  -> pool cost 20 × 0.06 = 1.20
Energy: the counter rises 60,000 J (60,000,000 mJ) a sample, from a lookback sample at index -1; at
0.36/kWh that is 60,000 / 3,600,000 × 0.36 = 0.006 a sample.
"""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest

from gpumeter.billing.invoices import Period, build_invoice_lines
from gpumeter.config import IDLE, ConfigError, parse_config
from tests.test_rules import (
    A100,
    DAY,
    H100,
    P1,
    P2,
    charges,
    factory,
    holder,
    make_config,
    meter,
    one,
    pool_cost,
    rows,
)

D = Decimal
ENERGY_STEP_MJ = 60_000_000  # 60,000 J a sample: a 1 kW GPU over Δ = 60 s


def shared_day(energy: bool = False, day: date = DAY) -> Any:
    f = factory(day).gpu("n1", "GPU-1", H100)

    def extra(index: int) -> dict[str, Any]:
        return {"energy": (index + 1) * ENERGY_STEP_MJ} if energy else {}

    if energy:
        f.sample("GPU-1", -1, util=0, **extra(-1))  # lookback: the counter's previous value (R10)
    for i in range(20):
        pod = P1 if i < 10 else P2 if i < 15 else None
        util = 50 if i < 10 else 100 if i < 15 else 0
        f.sample("GPU-1", i, util=util, pod=pod, **extra(i))
    return f


def config(tariff: str = "reserved", idle_policy: str = "platform", **extra: Any) -> Any:
    overrides: dict[str, Any] = {"tariff": tariff, "idle_policy": idle_policy, **extra}
    if tariff == "hybrid":
        overrides["hybrid"] = {"reserved_fraction": 0.4}
    return make_config(**overrides)


def energy_config(tariff: str = "reserved", idle_policy: str = "platform") -> Any:
    rate_card = {**make_config().rate_card.model_dump(), "energy_price_per_kwh": 0.36}
    return config(tariff, idle_policy, rate_card=rate_card)


# --- tariffs under idle_policy: platform ---------------------------------------------------------


def test_reserved_tariff_is_the_default_r9() -> None:
    out = meter(shared_day())
    assert make_config().tariff == "reserved"
    assert charges(out) == {
        ("team-a", "reserved"): D("0.60"),
        ("team-b", "reserved"): D("0.30"),
        (IDLE, "idle"): D("0.30"),  # 1.20 − 0.90
    }


def test_used_tariff_bills_busy_gpu_seconds_r10() -> None:
    """R10: Σ busy × Δ × weight × share × price / 3600; what holders do not pay is __idle__ (R13)."""
    out = meter(shared_day(), config("used"))
    assert charges(out) == {
        ("team-a", "usage"): D("0.30"),  # 10 × 0.5 × 60 × 3.60 / 3600
        ("team-b", "usage"): D("0.30"),  # 5 × 1.0 × 60 × 3.60 / 3600
        (IDLE, "idle"): D("0.60"),  # 1.20 − 0.60: the unheld 5 samples and p1's unused half
    }
    line = one(out, "mart_tenant_daily_cost", tenant="team-a")
    # The usage line's quantities are busy ones, so its unit price is the GPU's price: 0.30 / (300/3600).
    assert (line["device_seconds"], line["gpu_seconds"], line["busy_gpu_seconds"]) == (D(300), D(300), D(300))
    assert line["amount"] / (line["gpu_seconds"] / 3600) == D("3.6")
    idle = one(out, "mart_tenant_daily_cost", tenant=IDLE)
    assert idle["gpu_seconds"] == D(300)  # unheld GPU-seconds: 20 × 60 − 900 held


def test_hybrid_tariff_is_a_fraction_of_reserved_plus_the_rest_of_usage() -> None:
    """hybrid {reserved_fraction: 0.4}: 0.4 × reserved + 0.6 × used, as a reserved and a usage line."""
    out = meter(shared_day(), config("hybrid"))
    assert charges(out) == {
        ("team-a", "reserved"): D("0.24"),  # 0.4 × 0.60
        ("team-a", "usage"): D("0.18"),  # 0.6 × 0.30
        ("team-b", "reserved"): D("0.12"),  # 0.4 × 0.30
        ("team-b", "usage"): D("0.18"),  # 0.6 × 0.30
        (IDLE, "idle"): D("0.48"),  # 1.20 − 0.72
    }
    reserved = one(out, "mart_tenant_daily_cost", tenant="team-a", charge_type="reserved")
    usage = one(out, "mart_tenant_daily_cost", tenant="team-a", charge_type="usage")
    assert reserved["gpu_seconds"] == D(600) and usage["gpu_seconds"] == D(300)  # held; busy
    # Busy GPU-seconds are counted once over a tenant's lines: on the reserved line.
    assert reserved["busy_gpu_seconds"] == D(300) and usage["busy_gpu_seconds"] == D(0)


@pytest.mark.parametrize(("fraction", "expected"), [(1, "reserved"), (0, "used")])
def test_hybrid_at_its_ends_charges_what_reserved_and_used_charge(fraction: int, expected: str) -> None:
    hybrid = make_config(tariff="hybrid", hybrid={"reserved_fraction": fraction})
    mixed = {k: v for k, v in charges(meter(shared_day(), hybrid)).items() if v}
    pure = charges(meter(shared_day(), config(expected)))
    assert mixed == pure


def test_used_tariff_on_mig_instances_weighs_busy_by_the_instance_r3_r10() -> None:
    """A100 MIG: a 1g.10gb (1/7, 0.01 a sample) at GR 0.5 and a 3g.40gb (3/7, 0.03 a sample) at GR 1.0, 2
    samples each; the GPU costs 2 × 0.07 = 0.14."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="1", profile="1g.10gb", pod=P1)
    f.samples("GPU-M", range(2), gr=1.0, gpu_i_id="2", profile="3g.40gb", pod=P2)
    out = meter(f, config("used"))
    assert pool_cost(out) == D("0.14")
    assert charges(out) == {
        ("team-a", "usage"): D("0.01"),  # 2 × 0.01 × 0.5
        ("team-b", "usage"): D("0.06"),  # 2 × 0.03 × 1.0
        (IDLE, "idle"): D("0.07"),
    }
    assert holder(out, "p1")["busy_device_seconds"] == D(60)  # 2 × 60 × 0.5, not weighted
    assert holder(out, "p1")["used_cost"] == D("0.01")


# --- idle policies under each tariff (R9) --------------------------------------------------------


@pytest.mark.parametrize(
    ("tariff", "expected"),
    [
        # idle 0.30 spread by reserved charge 0.60 : 0.30
        ("reserved", {"team-a": ("0.60", "0.20"), "team-b": ("0.30", "0.10")}),
        # idle 0.60 spread by usage charge 0.30 : 0.30
        ("used", {"team-a": ("0.30", "0.30"), "team-b": ("0.30", "0.30")}),
        # idle 0.48 spread by hybrid charge 0.42 : 0.30 -> 0.28 : 0.20
        ("hybrid", {"team-a": ("0.42", "0.28"), "team-b": ("0.30", "0.20")}),
    ],
)
def test_proportional_idle_spreads_by_the_charge_under_the_tariff_r9(
    tariff: str, expected: dict[str, tuple[str, str]]
) -> None:
    out = meter(shared_day(), config(tariff, "proportional"))
    found = charges(out)
    assert not [key for key in found if key[0] == IDLE]  # R9: no __idle__ left
    for tenant, (charge, idle_share) in expected.items():
        tariff_charge = sum((v for (t, c), v in found.items() if t == tenant and c != "idle_share"), D(0))
        assert tariff_charge == D(charge)
        assert found[(tenant, "idle_share")] == D(idle_share)
    assert sum(found.values(), D(0)) == D("1.20")


def test_proportional_under_used_keeps_idle_of_a_model_nobody_used() -> None:
    """Held but never busy: no usage charge to spread by, so the GPU's cost stays __idle__ (R9, R13)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(4), util=0, pod=P1)
    out = meter(f, config("used", "proportional"))
    assert charges(out) == {("team-a", "usage"): D(0), (IDLE, "idle"): D("0.24")}


# --- energy (R10, R14) ---------------------------------------------------------------------------


def test_energy_lines_are_kwh_times_the_price_and_the_rest_is_idle_energy() -> None:
    out = meter(shared_day(energy=True), energy_config())
    pool = one(out, "mart_pool_daily_cost")
    assert pool["energy_joules"] == D(1_200_000)  # 20 × 60,000 J
    assert pool["energy_cost"] == D("0.12")  # 1.2 MJ = 1/3 kWh × 0.36
    assert pool["capacity_cost"] == D("1.20") and pool["pool_cost"] == D("1.32")
    assert charges(out) == {
        ("team-a", "reserved"): D("0.60"),
        ("team-a", "energy"): D("0.06"),  # 10 × 60,000 J = 1/6 kWh × 0.36
        ("team-b", "reserved"): D("0.30"),
        ("team-b", "energy"): D("0.03"),  # 5 × 60,000 J
        (IDLE, "idle"): D("0.30"),
        (IDLE, "energy"): D("0.03"),  # the unheld 5 samples' energy
    }
    energy = one(out, "mart_tenant_daily_cost", tenant="team-a", charge_type="energy")
    assert (energy["energy_joules"], energy["gpu_seconds"]) == (D(600_000), D(0))
    # Energy is counted once over all lines: on the energy lines, not also on the reserved ones.
    lines = out["mart_tenant_daily_cost"].to_pylist()
    assert sum((r["energy_joules"] for r in lines), D(0)) == D(1_200_000)


def test_an_energy_price_change_counts_from_its_day_on() -> None:
    """R8, R10: the energy price changes like a GPU price, from a UTC day on (docs/config.md, "Price
    changes"); null stops energy lines from that day on. Each day is metered at its own day's price."""
    rate_card = {
        **make_config().rate_card.model_dump(),
        "energy_price_per_kwh": 0.36,
        "energy_price_changes": [
            {"effective_from": "2026-11-02", "price_per_kwh": 0.72},
            {"effective_from": "2026-11-03", "price_per_kwh": None},
        ],
    }
    days = [
        meter(shared_day(energy=True, day=DAY + timedelta(days=n)), config(rate_card=rate_card))
        for n in range(3)
    ]
    # By hand: team-a's 10 samples of 60,000 J are 1/6 kWh, the GPU's 20 are 1/3 kWh.
    for out, price, team_a, pool in ((days[0], "0.36", "0.06", "0.12"), (days[1], "0.72", "0.12", "0.24")):
        assert charges(out)[("team-a", "energy")] == D(team_a), price
        assert one(out, "mart_pool_daily_cost")["energy_cost"] == D(pool), price
    assert not rows(days[2], "mart_tenant_daily_cost", charge_type="energy")
    assert one(days[2], "mart_pool_daily_cost")["pool_cost"] == D("1.20")  # GPU time only
    # The first day is metered as without the changes.
    assert days[0]["mart_tenant_daily_cost"].equals(
        meter(shared_day(energy=True), energy_config())["mart_tenant_daily_cost"]
    )


def test_without_an_energy_price_there_are_no_energy_lines_and_pool_cost_is_gpu_time() -> None:
    out = meter(shared_day(energy=True))
    assert not rows(out, "mart_tenant_daily_cost", charge_type="energy")
    pool = one(out, "mart_pool_daily_cost")
    assert (pool["energy_cost"], pool["pool_cost"]) == (D(0), D("1.20"))
    # the metered energy still shows, once: on the holders' time lines and __idle__'s line
    assert one(out, "mart_tenant_daily_cost", tenant="team-a")["energy_joules"] == D(600_000)
    assert one(out, "mart_tenant_daily_cost", tenant=IDLE)["energy_joules"] == D(300_000)


def test_energy_under_used_tariff_and_proportional_idle() -> None:
    """used + proportional + energy: idle time 0.60 and idle energy 0.03 are spread by usage charge
    0.30 : 0.30, 0.315 each; energy lines stay each tenant's own."""
    out = meter(shared_day(energy=True), energy_config("used", "proportional"))
    assert charges(out) == {
        ("team-a", "usage"): D("0.30"),
        ("team-a", "energy"): D("0.06"),
        ("team-a", "idle_share"): D("0.315"),
        ("team-b", "usage"): D("0.30"),
        ("team-b", "energy"): D("0.03"),
        ("team-b", "idle_share"): D("0.315"),
    }


def test_mig_energy_lines_follow_the_weight_apportioning_r10() -> None:
    """The GPU-level counter steps 70 J a sample; a 3g.40gb (3/7) gets 30 J, a 1g.10gb (1/7) 10 J; the
    unpartitioned 3/7 is __idle__'s. At 36/kWh (0.00001 a joule): 2 samples -> 0.0006, 0.0002, pool 0.0014."""
    f = factory().gpu("n2", "GPU-M", A100)
    for i in range(-1, 2):
        f.sample("GPU-M", i, energy=(i + 1) * 70_000)  # GPU-level series (no GPU_I_ID)
    f.samples("GPU-M", range(2), gr=1.0, gpu_i_id="1", profile="3g.40gb", pod=P1)
    f.samples("GPU-M", range(2), gr=1.0, gpu_i_id="2", profile="1g.10gb", pod=P2)
    rate_card = {**make_config().rate_card.model_dump(), "energy_price_per_kwh": 36}
    found = charges(meter(f, make_config(rate_card=rate_card)))
    assert found[("team-a", "energy")] == D("0.0006")  # 2 × 30 J × 0.00001
    assert found[("team-b", "energy")] == D("0.0002")  # 2 × 10 J
    assert found[(IDLE, "energy")] == D("0.0006")  # 0.0014 − 0.0008


# --- config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tariff: hybrid\n", "tariff: hybrid needs `hybrid: {reserved_fraction: F}`"),
        ("hybrid: {reserved_fraction: 0.4}\n", "`hybrid` is set but tariff is 'reserved'"),
        ("tariff: hybrid\nhybrid: {reserved_fraction: 1.5}\n", "less than or equal to 1"),
        ("tariff: hybrid\nhybrid: {reserved_fraction: 0.1234567}\n", "more than 6 decimals"),
        ("tariff: metered\n", "'reserved', 'used' or 'hybrid'"),
    ],
)
def test_tariff_config_problems_are_one_clear_message(text: str, message: str) -> None:
    base = "clusters: [{name: c1, source: {kind: parquet, path: x}}]\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(base + text, source="t.yaml")
    assert len(caught.value.problems) == 1
    assert message in caught.value.problems[0][1]


# --- through the invoice (R12, R14) ---------------------------------------------------------------


def test_hybrid_with_energy_on_the_invoice_unit_prices_and_reconciliation() -> None:
    """Invoice lines of the shared day under hybrid 0.4 with energy at 0.36/kWh: the reserved line's unit
    price is 0.4 × 3.60 per held GPU-hour, the usage line's 0.6 × 3.60 per busy GPU-hour, the energy line
    bills kWh; the lines sum to the pool cost (R13)."""
    config = energy_config("hybrid")
    out = meter(shared_day(energy=True), config)
    lines = build_invoice_lines(out["mart_tenant_daily_cost"], config, Period(2026, 11)).to_pylist()
    team_a = {line["charge_type"]: line for line in lines if line["tenant"] == "team-a"}
    # gpu_hours are shown to 9 places: 600 s held = 0.166666667 h, 300 s busy = 0.083333333 h.
    assert team_a["reserved"]["gpu_hours"] == D("0.166666667") and team_a["reserved"]["unit_price"] == D(
        "1.44"
    )
    assert team_a["usage"]["gpu_hours"] == D("0.083333333") and team_a["usage"]["unit_price"] == D("2.16")
    assert team_a["energy"]["amount"] == D("0.06")
    assert team_a["energy"]["energy_kwh"] == D("0.166666667")  # 600,000 J = 1/6 kWh, to 9 places
    assert sum((line["amount_unrounded"] for line in lines), D(0)) == pool_cost(out) == D("1.32")
