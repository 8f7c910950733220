"""MIG right-sizing (gpumeter/views/rightsizing.py): the smallest profile of the GPU's catalog family (R3) that fits
the observed peaks, priced with the rate card (R8). Expected values are worked by hand."""

from __future__ import annotations

import re
from decimal import Decimal

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumeter.config import Config, parse_config
from gpumeter.models.device_classes import BUILTIN_MIG_CATALOG
from gpumeter.views.rightsizing import MIB_PER_GB, HolderPeak, advise, holder_peaks, smallest_fitting_profile

H100 = "NVIDIA H100 80GB HBM3"
CONFIG = """
clusters: [{name: c, source: {kind: parquet, path: /x}}]
rate_card:
  models:
    - {model: H100-80GB, aliases: ["NVIDIA H100*"], price_per_gpu_hour: 4.20}
    - {model: A100-40GB, aliases: ["NVIDIA A100-SXM4-40GB"], price_per_gpu_hour: 1.40,
       mig_profiles: {1g.5gb: 0.35}}
    - {model: T4, aliases: ["Tesla T4"], price_per_gpu_hour: 0.50}
tenants: [{name: serving, namespaces: [inference]}]
"""


@pytest.fixture(scope="module")
def config() -> Config:
    return parse_config(CONFIG)


def holder(model_name: str, hours: str, peak_mib: float | None, peak_busy: float | None) -> HolderPeak:
    return HolderPeak("c", "n1", "GPU-1", model_name, "m", "serving", "inference", "pod-a", Decimal(hours),
                      peak_mib, peak_busy)  # fmt: skip


@pytest.mark.parametrize(
    ("model", "peak_mib", "peak_busy", "expected"),
    [
        (H100, 3521, 0.024, ("1g.10gb", 1, 10_000)),  # a notebook holding a whole H100
        (H100, 15_000, 0.10, ("1g.20gb", 1, 20_000)),  # memory needs 2 of 8 slices, compute 1 of 7
        (H100, 30_000, 0.50, ("4g.40gb", 4, 40_000)),  # busy 0.5 > 3/7: 4 compute slices
        (H100, 39_000, 0.30, ("3g.40gb", 3, 40_000)),
        (H100, 45_000, 0.10, None),  # more than 4g.40gb's memory: only the whole GPU fits
        (H100, 1_000, 0.90, None),  # busier than 4/7: only the whole GPU fits
        ("NVIDIA A100-SXM4-40GB", 4_000, 0.1, ("1g.5gb", 1, 5_000)),
        ("Tesla T4", 100, 0.0, None),  # no MIG family
    ],
)
def test_smallest_fitting_profile(
    config: Config, model: str, peak_mib: float, peak_busy: float, expected: tuple[str, int, int] | None
) -> None:
    assert smallest_fitting_profile(config, model, peak_mib, peak_busy) == expected


def test_monthly_saving_by_hand(config: Config) -> None:
    # 48 GPU-hours held over 2 metered days of a 30-day month: 720 hours a month at that pattern.
    # H100 at 4.20/h → 1g.10gb weighs 1/7 (R3): 0.60/h. Saving (4.20 − 0.60) × 720 = 2592.
    [advice] = advise([holder(H100, "48", 3521, 0.024)], config, metered_days=2, days_in_month=30)
    assert advice.profile == "1g.10gb"
    assert advice.gpu_price_per_hour == Decimal("4.2")
    assert abs(advice.profile_price_per_hour - Decimal("0.6")) < Decimal("1e-12")
    assert abs(advice.monthly_saving - Decimal("2592")) < Decimal("1e-9")


def test_an_explicit_profile_price_is_used(config: Config) -> None:
    # R8: A100-40GB 1g.5gb priced 0.35/h explicitly (not 1.40/7 = 0.20). 10 h over 1 day of 30: 300 h.
    [advice] = advise([holder("NVIDIA A100-SXM4-40GB", "10", 4000, 0.1)], config, 1, 30)
    assert advice.profile_price_per_hour == Decimal("0.35")
    assert abs(advice.monthly_saving - Decimal("1.05") * 300) < Decimal("1e-9")


def test_no_advice_without_peaks_fit_or_price(config: Config) -> None:
    holders = [holder(H100, "10", None, 0.1), holder(H100, "10", 60_000, 0.1), holder("Tesla T4", "10", 1, 0)]
    assert advise(holders, config, 1, 30) == []
    assert advise([holder(H100, "10", 1000, 0.01)], config, 0, 30) == []  # nothing metered yet
    opencost = parse_config(CONFIG.replace("rate_card:\n", "rate_card:\n  price_source: opencost\n"))
    assert advise([holder(H100, "10", 1000, 0.01)], opencost, 1, 30) == []  # no per-profile price to compare


def test_largest_saving_first(config: Config) -> None:
    small = holder(H100, "1", 1000, 0.01)
    large = holder(H100, "100", 1000, 0.01)
    assert [a.holder.held_gpu_hours for a in advise([small, large], config, 1, 30)] == [
        Decimal(100),
        Decimal(1),
    ]


H100_PROFILES = next(f for f in BUILTIN_MIG_CATALOG if f.family == "H100-80GB").profiles


@given(peak_mib=st.floats(0, 90_000), peak_busy=st.floats(0, 1))
def test_the_suggestion_fits_and_nothing_smaller_does(peak_mib: float, peak_busy: float) -> None:
    config = parse_config(CONFIG)
    fit = smallest_fitting_profile(config, H100, peak_mib, peak_busy)

    def fits(profile: str) -> bool:
        compute = H100_PROFILES[profile][0]
        memory_mib = int(re.match(r"\d+g\.(\d+)gb", profile).group(1)) * MIB_PER_GB  # type: ignore[union-attr]
        return compute < 7 and compute / 7 >= peak_busy and memory_mib >= peak_mib

    fitting = [p for p in H100_PROFILES if fits(p)]
    if fit is None:
        assert fitting == []
        return
    profile, compute, _ = fit
    assert fits(profile)
    assert all(H100_PROFILES[p] >= H100_PROFILES[profile] for p in fitting)  # none with fewer slices
    assert compute == H100_PROFILES[profile][0]


MODELS = (H100, "NVIDIA A100-SXM4-40GB", "Tesla T4", "Unknown GPU")
holders_strategy = st.lists(
    st.builds(
        lambda i, model, hours, mib, busy: HolderPeak(
            "c", "n1", f"GPU-{i}", model, "m", "serving", "inference", f"pod-{i}", Decimal(hours), mib, busy
        ),
        st.integers(0, 50),
        st.sampled_from(MODELS),
        st.integers(0, 500),
        st.none() | st.floats(0, 90_000),
        st.none() | st.floats(0, 1),
    ),
    max_size=30,
)


@given(holders=holders_strategy)
def test_advice_over_many_holders_is_each_holders_own(holders: list[HolderPeak]) -> None:
    """advise looks ladders and prices up once per model and profile (a month of a large fleet is ~50,000
    holders): the answer for a holder does not depend on the others, an unknown model included (R3, R8)."""
    config = parse_config(CONFIG)
    together = advise(holders, config, 2, 30)
    alone = [a for h in holders for a in advise([h], config, 2, 30)]
    key = lambda a: (-a.monthly_saving, a.holder.tenant, a.holder.pod)  # noqa: E731
    assert sorted(together, key=key) == sorted(alone, key=key)
    for a in together:
        assert (a.profile, a.compute_slices, a.profile_memory_mib) == smallest_fitting_profile(
            config, a.holder.model_name, a.holder.peak_fb_used_mib or 0, a.holder.peak_busy or 0
        )


@given(holders=holders_strategy)
def test_holder_peaks_reads_the_view_rows_back(holders: list[HolderPeak]) -> None:
    """The whole_gpu_holders view's columns (held hours as a float, as the view computes them) → HolderPeaks."""
    frame = pl.DataFrame(
        {
            "cluster": [h.cluster for h in holders], "node": [h.node for h in holders],
            "uuid": [h.uuid for h in holders], "model_name": [h.model_name for h in holders],
            "gpu_model": [h.gpu_model for h in holders], "tenant": [h.tenant for h in holders],
            "namespace": [h.namespace for h in holders], "pod": [h.pod for h in holders],
            "held_gpu_hours": [float(h.held_gpu_hours) for h in holders],
            "used_gpu_hours": [0.0 for _ in holders],
            "peak_fb_used_mib": [h.peak_fb_used_mib for h in holders],
            "peak_busy": [h.peak_busy for h in holders],
        },
        schema_overrides={"peak_fb_used_mib": pl.Float64, "peak_busy": pl.Float64},
    )  # fmt: skip
    back = holder_peaks(frame)
    assert [(h.uuid, h.model_name, h.pod, h.peak_fb_used_mib, h.peak_busy) for h in back] == [
        (h.uuid, h.model_name, h.pod, h.peak_fb_used_mib, h.peak_busy) for h in holders
    ]
    assert [h.held_gpu_hours for h in back] == [Decimal(str(float(h.held_gpu_hours))) for h in holders]
