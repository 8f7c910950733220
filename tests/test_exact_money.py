"""Exact money (R12): no per-sample term is truncated, so an invoice line is its exact amount rounded once.

The truth is computed here with fractions.Fraction from the inputs alone — Δ / 3600 × price × weight × share
per sample, summed — never from the code under test. The day's invoice lines must be that, rounded half to
even to the cent; `__idle__` is the pool's exact cost minus every holder's.
"""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import date
from decimal import Decimal
from fractions import Fraction
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpumeter.billing.invoices import Period, build_invoice_lines
from gpumeter.config import IDLE, parse_config
from gpumeter.models.runner import meter_day
from tests.builders import FactoryBuilder

DAY = date(2026, 11, 1)
H100 = "NVIDIA H100 80GB HBM3"
# Compute slices of the H100-80GB profiles used below (docs/telemetry.md): weight = slices / 7.
PROFILES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 3}
SETTINGS = settings(
    max_examples=int(os.environ.get("GPUMETER_PROPERTY_EXAMPLES", "8")) * 4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _config(scrape_s: int, price: str) -> Any:
    doc = {
        "clusters": [{"name": "c1", "source": {"kind": "parquet", "path": "/nonexistent"}}],
        "scrape_interval_seconds": scrape_s,
        "rate_card": {
            "models": [{"model": "H100-80GB", "aliases": [H100], "price_per_gpu_hour": float(price)}]
        },
        "tenants": [{"name": f"team-{i}", "namespaces": [f"ns-{i}"]} for i in range(4)],
    }
    return parse_config(yaml.safe_dump(doc))


def _cents(amount: Fraction) -> Decimal:
    """Half to even, to the cent, from the exact value (Python rounds a Fraction half to even)."""
    return Decimal(round(amount * 100)) / 100


def _lines(out: dict, config: Any) -> dict[tuple[str, str], Decimal]:
    """(tenant, MIG profile) -> the amount of that invoice line (one GPU model here; R14 lines)."""
    lines = build_invoice_lines(out["mart_tenant_daily_cost"], config, Period.of(DAY)).to_pylist()
    return {(line["tenant"], line["mig_profile"]): line["amount"] for line in lines}


def test_eighteen_samples_of_thirty_seconds_at_2_50_is_0_375_and_rounds_to_0_38() -> None:
    """The issue's case: 18 × 30 s × 2.50 / 3600 = 0.375 exactly, half to even → 0.38 (truncating each
    sample's 0.0208333… term to 12 places gave 0.374999999994, billed 0.37)."""
    f = FactoryBuilder("c1", DAY, scrape_s=30).gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(18), util=50, pod=("ns-0", "p", "c"))
    config = _config(30, "2.50")
    out = meter_day(f.build(), config, "c1", DAY)
    assert _lines(out, config) == {("team-0", ""): Decimal("0.38"), (IDLE, ""): Decimal("0.00")}
    assert out["mart_device_seconds"].to_pylist()[0]["reserved_cost"] == Decimal("0.375")


@st.composite
def pools(draw: st.DrawFn) -> dict[str, Any]:
    scrape_s = draw(st.sampled_from([1, 7, 15, 30, 45, 60, 90]))
    price = draw(st.decimals(min_value=Decimal("0.01"), max_value=Decimal("40"), places=4))
    gpus = []
    for g in range(draw(st.integers(1, 3))):
        profiles = draw(st.sampled_from([None, ["3g.40gb", "2g.20gb", "2g.20gb"], ["1g.10gb"] * 3]))
        devices = [None] if profiles is None else [(str(i + 1), p) for i, p in enumerate(profiles)]
        for device in devices:
            # A run of consecutive scrapes: samples scattered with gaps of 2 Δ or more are a scrape interval
            # set wrong, which the day's interval check refuses (test_rules), not a money case.
            first = draw(st.integers(0, 40))
            samples = list(range(first, first + draw(st.integers(0, 30))))
            holders = draw(st.lists(st.integers(0, 3), min_size=0, max_size=3, unique=True))
            gpus.append((f"GPU-{g}", device, sorted(samples), holders))
        # A MIG GPU's GPU-level series: observed wherever any of its series is.
    return {"scrape_s": scrape_s, "price": price, "gpus": gpus}


@SETTINGS
@given(pools())
def test_every_line_is_its_exact_amount_rounded_once(pool: dict[str, Any]) -> None:
    """Random Δ, prices, MIG weights and shares: each tenant's line = round(Σ Δ/3600 × price × weight × 1/n),
    and __idle__ = round(pool cost − Σ holders), both exact before the one rounding."""
    scrape_s, price = pool["scrape_s"], Fraction(pool["price"])
    f = FactoryBuilder("c1", DAY, scrape_s=scrape_s)
    truth: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    observed: dict[str, set[int]] = defaultdict(set)
    for uuid, device, samples, holders in pool["gpus"]:
        f.gpu("n1", uuid, H100)
        weight = Fraction(1) if device is None else Fraction(PROFILES[device[1]], 7)
        gpu_i_id, profile = device if device is not None else (None, None)
        for index in samples:
            observed[uuid].add(index)
            if not holders:
                f.sample(uuid, index, gr=0.5, gpu_i_id=gpu_i_id, profile=profile)
            for h in holders:
                f.sample(
                    uuid, index, gr=0.5, gpu_i_id=gpu_i_id, profile=profile, pod=(f"ns-{h}", f"p{h}", "c")
                )
                line = (f"team-{h}", profile or "")
                truth[line] += Fraction(scrape_s, 3600) * price * weight / len(holders)
    config = _config(scrape_s, str(pool["price"]))
    out = meter_day(f.build(), config, "c1", DAY)
    pool_cost = sum((Fraction(scrape_s, 3600) * price * len(seen) for seen in observed.values()), Fraction(0))
    want = {tenant: _cents(amount) for tenant, amount in truth.items()}
    if observed:
        want[(IDLE, "")] = _cents(pool_cost - sum(truth.values(), Fraction(0)))
    got = _lines(out, config)
    assert got == want
    # R13 on the exact units of the day.
    units = out["mart_tenant_daily_cost"].to_pylist()
    pool_units = sum(int(r["pool_units"]) for r in out["mart_pool_daily_cost"].to_pylist())
    assert sum(int(r["amount_units"]) for r in units) == pool_units
    if units:
        assert Fraction(pool_units, int(units[0]["units_per_currency"])) == pool_cost
