"""R3 weights (the MIG catalog) and R8 prices (rate-card model matching, per-profile prices)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from gpumeter.config import Config
from gpumeter.models.device_classes import (
    BUILTIN_MIG_CATALOG,
    CatalogError,
    CatalogWarning,
    match_model,
    mig_slices,
    resolve_device_class,
)

A100_40 = "NVIDIA A100-SXM4-40GB"
A100_40_PCIE = "NVIDIA A100-PCIE-40GB"
A100_80 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
H100_PCIE = "NVIDIA H100 PCIe"
H200 = "NVIDIA H200"

MODELS: list[dict[str, Any]] = [
    {"model": "A100-40GB", "aliases": [A100_40, "NVIDIA A100-PCIE-40GB"], "price_per_gpu_hour": 1.4},
    {"model": "A100-80GB", "aliases": ["NVIDIA A100*80GB*"], "price_per_gpu_hour": 2.8},
    {"model": "H100-80GB", "aliases": ["NVIDIA H100*"], "price_per_gpu_hour": 3.5},
    {"model": "H200-141GB", "aliases": ["NVIDIA H200*"], "price_per_gpu_hour": 7.0},
]


def make(rate_card: dict[str, Any] | None = None) -> Config:
    return Config.model_validate(
        {
            "clusters": [{"name": "a", "source": {"kind": "parquet", "path": "x"}}],
            "rate_card": {"models": MODELS, **(rate_card or {})},
        }
    )


def slices(config: Config, model: str, profile: str) -> tuple[int, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", CatalogWarning)  # catalog profiles never warn
        compute, memory, from_catalog = mig_slices(config, model, profile)
    assert from_catalog
    return compute, memory


# --- R3: the built-in catalog ----------------------------------------------------------------

BUILTIN = [
    # (modelName, profile, compute slices of 7, memory slices of 8)
    (A100_40, "1g.5gb", 1, 1),
    (A100_40, "1g.10gb", 1, 2),
    (A100_40, "2g.10gb", 2, 2),
    (A100_40, "3g.20gb", 3, 4),
    (A100_40, "4g.20gb", 4, 4),
    (A100_40, "7g.40gb", 7, 8),
    (A100_40_PCIE, "1g.10gb", 1, 2),
    (A100_80, "1g.10gb", 1, 1),
    (A100_80, "1g.20gb", 1, 2),
    (A100_80, "2g.20gb", 2, 2),
    (A100_80, "3g.40gb", 3, 4),
    (A100_80, "4g.40gb", 4, 4),
    (A100_80, "7g.80gb", 7, 8),
    ("NVIDIA A100 80GB PCIe", "3g.40gb", 3, 4),
    (H100, "1g.10gb", 1, 1),
    (H100, "1g.20gb", 1, 2),
    (H100, "2g.20gb", 2, 2),
    (H100, "3g.40gb", 3, 4),
    (H100, "4g.40gb", 4, 4),
    (H100, "7g.80gb", 7, 8),
    (H100_PCIE, "3g.40gb", 3, 4),
    ("NVIDIA H100", "2g.20gb", 2, 2),
    (H200, "1g.18gb", 1, 1),
    (H200, "1g.35gb", 1, 2),
    (H200, "2g.35gb", 2, 2),
    (H200, "3g.71gb", 3, 4),
    (H200, "4g.71gb", 4, 4),
    (H200, "7g.141gb", 7, 8),
]


@pytest.mark.parametrize(("model", "profile", "compute", "memory"), BUILTIN)
def test_builtin_slices_and_weights(model: str, profile: str, compute: int, memory: int) -> None:
    """R3: weight = compute/7 under `mig_weight: compute` (default), memory/8 under `memory`."""
    assert slices(make(), model, profile) == (compute, memory)
    by_compute = resolve_device_class(make(), model, profile)
    assert (by_compute.compute_slices, by_compute.memory_slices) == (compute, memory)
    assert by_compute.weight == compute / 7
    assert resolve_device_class(make({"mig_weight": "memory"}), model, profile).weight == memory / 8


def test_the_catalog_covers_the_families_r3_names() -> None:
    assert {f.family for f in BUILTIN_MIG_CATALOG} >= {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"}
    for family in BUILTIN_MIG_CATALOG:
        assert max(c for c, _ in family.profiles.values()) == 7
        assert max(m for _, m in family.profiles.values()) == 8


def test_1g_10gb_is_ambiguous_between_a100_40gb_and_80gb_class_gpus() -> None:
    """`1g.10gb` is 1 compute + 2 memory slices on an A100-40GB but 1 + 1 on an A100-80GB or H100."""
    config = make({"mig_weight": "memory"})
    assert slices(config, A100_40, "1g.10gb") == (1, 2)
    assert slices(config, A100_80, "1g.10gb") == (1, 1)
    assert slices(config, H100, "1g.10gb") == (1, 1)
    assert resolve_device_class(config, A100_40, "1g.10gb").weight == 2 / 8
    assert resolve_device_class(config, A100_80, "1g.10gb").weight == 1 / 8
    # Under compute weights they agree.
    assert (
        resolve_device_class(make(), A100_40, "1g.10gb").weight
        == resolve_device_class(make(), H100, "1g.10gb").weight
    )


def test_an_unknown_model_with_an_ambiguous_profile_is_not_guessed() -> None:
    """A modelName no family knows: `1g.10gb` could be (1, 2) or (1, 1); gpumeter warns and weighs it N/7."""
    config = make(
        {"mig_weight": "memory", "models": [{"model": "X", "aliases": ["Acme*"], "price_per_gpu_hour": 7.0}]}
    )
    with pytest.warns(CatalogWarning, match="disagree"):
        cls = resolve_device_class(config, "Acme GPU", "1g.10gb")
    assert cls.weight == 1 / 7


def test_an_unknown_model_with_an_unambiguous_profile_uses_the_catalog() -> None:
    config = make(
        {"mig_weight": "memory", "models": [{"model": "X", "aliases": ["Acme*"], "price_per_gpu_hour": 7.0}]}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", CatalogWarning)
        assert resolve_device_class(config, "Acme GPU", "3g.71gb").weight == 4 / 8


@pytest.mark.parametrize(
    ("model", "profile", "base"),
    [(H100, "1g.10gb+me", "1g.10gb"), (A100_40, "1g.10gb+me", "1g.10gb"), (H200, "1g.18gb+me", "1g.18gb")],
)
def test_media_engine_variants_weigh_as_their_base(model: str, profile: str, base: str) -> None:
    for mig_weight in ("compute", "memory"):
        config = make({"mig_weight": mig_weight})
        assert slices(config, model, profile) == slices(config, model, base)
        assert (
            resolve_device_class(config, model, profile).weight
            == resolve_device_class(config, model, base).weight
        )
    assert resolve_device_class(make(), model, profile).mig_profile == profile  # shown as DCGM spells it


@pytest.mark.parametrize("mig_weight", ["compute", "memory"])
def test_an_unknown_parseable_profile_weighs_n_over_7_with_a_warning(mig_weight: str) -> None:
    """R3: outside the catalog, `<N>g.<M>gb` weighs N/7 (under either mig_weight) with a warning naming it."""
    config = make({"mig_weight": mig_weight})
    with pytest.warns(CatalogWarning, match=r"3g\.47gb"):
        cls = resolve_device_class(config, "NVIDIA H100 NVL", "3g.47gb", node="n1")
    assert cls.weight == 3 / 7 and cls.compute_slices == 3
    with pytest.warns(CatalogWarning, match=r"2g\.30gb"):
        assert resolve_device_class(config, H100, "2g.30gb").weight == 2 / 7  # known model, unknown profile


@pytest.mark.parametrize("profile", ["big", "1g", "g.10gb", "1g.10GB", "mig-1g.10gb", "1g.10gb+xx"])
def test_an_unparseable_profile_is_an_error_naming_it(profile: str) -> None:
    with pytest.raises(CatalogError) as caught:
        resolve_device_class(make(), H100, profile)
    assert repr(profile) in str(caught.value) and H100 in str(caught.value)
    assert "mig_catalog" in str(caught.value)


@pytest.mark.parametrize("profile", ["0g.5gb", "8g.90gb"])
def test_a_profile_claiming_impossible_compute_slices_is_an_error(profile: str) -> None:
    with pytest.raises(CatalogError, match=profile.replace(".", r"\.")):
        resolve_device_class(make(), "NVIDIA H100 NVL", profile)


def test_the_config_extends_the_catalog() -> None:
    config = make(
        {
            "mig_weight": "memory",
            "mig_catalog": [
                {
                    "family": "H100-NVL-94GB",
                    "models": ["*H100 NVL*"],
                    "profiles": {"3g.47gb": [3, 4], "1g.12gb": [1, 1]},
                }
            ],
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", CatalogWarning)
        cls = resolve_device_class(config, "NVIDIA H100 NVL", "3g.47gb")
    assert (cls.compute_slices, cls.memory_slices, cls.weight) == (3, 4, 4 / 8)
    assert slices(config, "NVIDIA H100 NVL", "1g.12gb+me") == (1, 1)


def test_the_config_overrides_a_builtin_for_the_gpus_its_globs_match() -> None:
    config = make(
        {
            "mig_weight": "memory",
            "mig_catalog": [
                {"family": "H100-custom", "models": ["*H100 80GB*"], "profiles": {"1g.10gb": [1, 2]}}
            ],
        }
    )
    assert slices(config, H100, "1g.10gb") == (1, 2)  # overridden
    assert slices(config, H100, "3g.40gb") == (3, 4)  # not listed by the override: the built-in still applies
    assert slices(config, H100_PCIE, "1g.10gb") == (1, 1)  # the override's globs do not match: built-in


def test_configured_families_are_searched_in_file_order() -> None:
    config = make(
        {
            "mig_catalog": [
                {"family": "first", "models": ["Acme*"], "profiles": {"2g.8gb": [2, 3]}},
                {"family": "second", "models": ["Acme X*"], "profiles": {"2g.8gb": [2, 5]}},
            ]
        }
    )
    assert slices(config, "Acme X1", "2g.8gb") == (2, 3)


# --- R8: model matching and prices -----------------------------------------------------------


def test_exact_canonical_name_then_exact_alias_then_glob_alias() -> None:
    config = make(
        {
            "models": [
                {"model": "broad", "aliases": ["NVIDIA H100*"], "price_per_gpu_hour": 1.0},
                {"model": "nvl", "aliases": ["NVIDIA H100 NVL"], "price_per_gpu_hour": 2.0},
                {"model": "NVIDIA H100 PCIe", "price_per_gpu_hour": 3.0},
                {"model": "later-glob", "aliases": ["NVIDIA H100 8*"], "price_per_gpu_hour": 4.0},
            ]
        }
    )

    def model_of(name: str) -> str | None:
        found = match_model(config, name)
        return found.model if found else None

    assert model_of("NVIDIA H100 NVL") == "nvl"  # exact alias beats an earlier glob
    assert model_of("NVIDIA H100 PCIe") == "NVIDIA H100 PCIe"  # exact canonical name beats an earlier glob
    assert model_of(H100) == "broad"  # two globs match: file order
    assert model_of("nvl") == "nvl"  # the canonical name itself
    assert model_of("Tesla T4") is None


def test_canonical_name_beats_an_alias_of_an_earlier_model() -> None:
    config = make(
        {
            "models": [
                {"model": "a", "aliases": ["H100-80GB"], "price_per_gpu_hour": 1.0},
                {"model": "H100-80GB", "price_per_gpu_hour": 2.0},
            ]
        }
    )
    assert resolve_device_class(config, "H100-80GB", None).gpu_model == "H100-80GB"


def test_alias_globs_are_case_sensitive_shell_globs() -> None:
    config = make(
        {"models": [{"model": "m", "aliases": ["NVIDIA A10?", "Tesla [TV]*"], "price_per_gpu_hour": 1.0}]}
    )
    assert match_model(config, "NVIDIA A10G") is not None
    assert match_model(config, "Tesla T4") is not None and match_model(config, "Tesla V100") is not None
    assert match_model(config, "nvidia a10g") is None and match_model(config, "Tesla A2") is None


def test_a_whole_gpu_weighs_1_at_its_model_price() -> None:
    cls = resolve_device_class(make(), H100, None)
    assert (cls.gpu_model, cls.mig_profile, cls.weight) == ("H100-80GB", None, 1.0)
    assert cls.gpu_price_per_hour == cls.device_price_per_hour == 3.5
    assert cls.model_name == H100


def test_a_mig_instance_costs_its_weight_times_the_gpu_price() -> None:
    cls = resolve_device_class(make(), H100, "3g.40gb")
    assert cls.gpu_price_per_hour == 3.5
    assert cls.device_price_per_hour == pytest.approx(3 / 7 * 3.5)
    memory = resolve_device_class(make({"mig_weight": "memory"}), H100, "3g.40gb")
    assert memory.device_price_per_hour == pytest.approx(4 / 8 * 3.5)


def test_a_model_without_a_price_is_an_error_naming_model_and_node() -> None:
    with pytest.raises(CatalogError) as caught:
        resolve_device_class(make(), "Tesla T4", None, node="gpu-node-7")
    message = str(caught.value)
    assert "'Tesla T4'" in message and "'gpu-node-7'" in message and "rate_card.models" in message


def test_a_matched_model_with_no_price_is_an_error_naming_model_and_node() -> None:
    config = make({"models": [{"model": "T4", "aliases": ["Tesla T4"]}]})
    with pytest.raises(CatalogError) as caught:
        resolve_device_class(config, "Tesla T4", None, node="gpu-node-7")
    message = str(caught.value)
    assert "'Tesla T4'" in message and "'gpu-node-7'" in message and "'T4'" in message
    assert "price_per_gpu_hour" in message


def test_a_price_of_zero_is_a_price_not_a_missing_one() -> None:
    config = make({"models": [{"model": "free", "aliases": ["Tesla T4"], "price_per_gpu_hour": 0}]})
    assert resolve_device_class(config, "Tesla T4", None).device_price_per_hour == 0


def test_per_profile_price_overrides_the_weighted_price() -> None:
    """R8: `mig_profiles` is the price per instance-hour; the weight (and the GPU's price) stay as they are."""
    config = make(
        {
            "models": [
                {
                    "model": "H100-80GB",
                    "aliases": ["NVIDIA H100*"],
                    "price_per_gpu_hour": 3.5,
                    "mig_profiles": {"1g.10gb": 0.8, "3g.40gb+me": 2.0, "3g.40gb": 1.2},
                }
            ]
        }
    )
    one = resolve_device_class(config, H100, "1g.10gb")
    assert (one.weight, one.device_price_per_hour, one.gpu_price_per_hour) == (1 / 7, 0.8, 3.5)
    assert (
        resolve_device_class(config, H100, "1g.10gb+me").device_price_per_hour == 0.8
    )  # falls back to its base
    assert resolve_device_class(config, H100, "3g.40gb+me").device_price_per_hour == 2.0  # its own entry wins
    assert resolve_device_class(config, H100, "3g.40gb").device_price_per_hour == 1.2
    other = resolve_device_class(config, H100, "2g.20gb")  # not listed: weight × GPU price
    assert other.device_price_per_hour == pytest.approx(2 / 7 * 3.5)
    # Invoices show unit_price per GPU-equivalent hour: 0.8 per instance-hour of a 1/7 device is 5.6.
    assert one.device_price_per_hour / one.weight == pytest.approx(5.6)


def test_per_profile_price_applies_only_to_its_model() -> None:
    config = make(
        {
            "models": [
                {
                    "model": "H100-80GB",
                    "aliases": ["NVIDIA H100*"],
                    "price_per_gpu_hour": 3.5,
                    "mig_profiles": {"1g.10gb": 0.8},
                },
                {"model": "A100-80GB", "aliases": ["NVIDIA A100*80GB*"], "price_per_gpu_hour": 2.8},
            ]
        }
    )
    assert resolve_device_class(config, A100_80, "1g.10gb").device_price_per_hour == pytest.approx(2.8 / 7)


def test_opencost_leaves_prices_to_the_node() -> None:
    config = make({"price_source": "opencost"})
    known = resolve_device_class(config, H100, "3g.40gb")
    assert known.gpu_model == "H100-80GB" and known.weight == 3 / 7
    assert known.gpu_price_per_hour is None and known.device_price_per_hour is None
    unknown = resolve_device_class(config, "Tesla T4", None)  # no rate-card entry needed: shown by modelName
    assert unknown.gpu_model == "Tesla T4" and unknown.weight == 1.0


def test_resolution_is_deterministic() -> None:
    config = make()
    assert resolve_device_class(config, H100, "3g.40gb") == resolve_device_class(config, H100, "3g.40gb")
