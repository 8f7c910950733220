"""The config file (docs/config.md): parsing, every problem reported with its place and line, warnings for
R7 overlaps, relative paths, the JSON Schema, `gpumeter config check|schema`, and docs that stay true to code."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from gpumeter import config as config_module
from gpumeter.config import (
    EXAMPLE_CONFIG,
    Config,
    ConfigError,
    ParquetSource,
    PrometheusSource,
    config_schema,
    config_warnings,
    load_config,
    parse_config,
)

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = Path(str(EXAMPLE_CONFIG))
DOCS = REPO / "docs" / "config.md"

MINIMAL = "clusters:\n  - name: a\n    source: {kind: parquet, path: x}\n"


def problems_of(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        parse_config(textwrap.dedent(text), source="t.yaml")
    return caught.value.problems


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing `needle`."""
    for number, line in enumerate(textwrap.dedent(text).splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(needle)


def warnings_of(text: str) -> list[tuple[str, str]]:
    return config_warnings(parse_config(textwrap.dedent(text)))


def _cli_main() -> Any:
    from gpumeter.cli.main import main

    return main


# --- the example and the basics --------------------------------------------------------------


def test_the_example_config_parses_with_no_warnings() -> None:
    config = load_config(EXAMPLE)
    assert config.pool == "demo-ai-factory"
    assert [t.name for t in config.tenants] == ["research", "evaluation", "ml-training", "serving"]
    assert [m.model for m in config.rate_card.models] == ["H100-80GB", "A100-80GB", "H200-141GB"]
    assert config.scrape_interval_seconds == 30
    assert config_warnings(config) == []


def test_defaults_of_a_minimal_config() -> None:
    config = parse_config(MINIMAL)
    assert config.pool == "gpu-pool" and config.currency == "USD" and config.minor_unit == 2
    assert config.scrape_interval_seconds == 30 and config.kube_lookback_seconds == 300
    assert config.idle_policy == "platform" and config.idle_threshold == 0.05
    assert config.rate_card.price_source == "rate_card" and config.rate_card.mig_weight == "compute"
    assert config.clusters[0].cluster_label == "cluster"
    assert config.warehouse.path == ".gpumeter/warehouse"
    assert config.stranded.min_free_cpu_cores == 1.0 and config.stranded.min_free_memory_gib == 4.0
    assert config.checks.min_coverage == 0.95
    assert config.tenants == []


# ISO 4217 minor units, written down by hand from the published list (ISO 4217 list one), not taken from
# the library under test. XOF, XAF, UGX, PYG, IQD and LYD were missing from the hand-written table once.
ISO_4217_BY_HAND = {
    "USD": 2,
    "EUR": 2,
    "JPY": 0,
    "KRW": 0,
    "BHD": 3,
    "CLF": 4,
    "XOF": 0,
    "XAF": 0,
    "UGX": 0,
    "PYG": 0,
    "IQD": 3,
    "LYD": 3,
    "KWD": 3,
    "ISK": 0,
}


@pytest.mark.parametrize(("currency", "expected"), sorted(ISO_4217_BY_HAND.items()))
def test_minor_unit_is_iso_4217s(currency: str, expected: int) -> None:
    """R12 rounds to the currency's minor unit, as ISO 4217 gives it (not CLDR's display digits: IQD)."""
    assert parse_config(f"{MINIMAL}currency: {currency}\n").minor_unit == expected


@pytest.mark.parametrize(("currency", "explicit"), [("USD", 4), ("JPY", 2), ("IQD", 0), ("XAU", 3)])
def test_currency_minor_unit_overrides_iso_4217(currency: str, explicit: int) -> None:
    text = f"{MINIMAL}currency: {currency}\ncurrency_minor_unit: {explicit}\n"
    assert parse_config(text).minor_unit == explicit


def test_an_unknown_currency_is_an_error_naming_the_field() -> None:
    [(place, message)] = problems_of(f"{MINIMAL}currency: ABC\n")
    assert place == "currency (line 4)"
    assert "'ABC' is not an ISO 4217 currency code" in message


def test_a_currency_without_a_minor_unit_needs_the_override() -> None:
    [(place, message)] = problems_of(f"{MINIMAL}currency: XAU\n")
    assert place.startswith("currency_minor_unit")
    assert "XAU has no ISO 4217 minor unit" in message and "currency_minor_unit" in message


def test_prometheus_source_defaults() -> None:
    config = parse_config("clusters:\n  - name: a\n    source: {kind: prometheus, url: 'http://prom:9090'}\n")
    source = config.clusters[0].source
    assert isinstance(source, PrometheusSource)
    assert source.verify_tls is True and source.timeout_seconds == 60.0 and source.retries == 3
    assert source.max_concurrent_queries == 4 and source.replica_labels == ["prometheus_replica", "replica"]
    assert source.bearer_token_env is None and source.headers_env is None and source.selector is None


def test_query_params_are_sent_as_the_api_spells_them() -> None:
    text = (
        "clusters:\n  - name: a\n    source:\n      kind: prometheus\n      url: 'http://thanos:9090'\n"
        "      query_params: {dedup: false, 'replicaLabels[]': rule_replica, step: 30}\n"
    )
    source = parse_config(text).clusters[0].source
    assert isinstance(source, PrometheusSource)
    assert source.query_parameters() == {
        "timeout": "60s",
        "dedup": "false",  # YAML's false, as the API spells it
        "replicaLabels[]": "rule_replica",
        "step": "30",
        "partial_response": "false",
        "max_source_resolution": "0s",
        "deny_partial_response": "1",
    }


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("partial_response", "gpumeter sends partial_response=false"),
        ("max_source_resolution", "gpumeter sends max_source_resolution=0s"),
        ("deny_partial_response", "gpumeter sends deny_partial_response=1"),
        ("time", "gpumeter sets it for each query"),
        ("query", "gpumeter sets it for each query"),
    ],
)
def test_query_params_may_not_set_what_gpumeter_sends(name: str, said: str) -> None:
    text = f"""\
        clusters:
          - name: a
            source:
              kind: prometheus
              url: 'http://thanos:9090'
              query_params: {{{name}: 'x'}}
        """
    [(place, message)] = problems_of(text)
    assert place == f"clusters[0].source.query_params (line {line_of(text, 'query_params')})"
    assert f"may not set {name!r}" in message and said in message


def test_config_is_immutable() -> None:
    config = parse_config(MINIMAL)
    with pytest.raises(ValueError):
        config.pool = "other"  # type: ignore[misc]


# --- every problem, with its place and line --------------------------------------------------

TWO_BAD_TENANTS = """\
pool: p
clusters:
  - name: a
    source: {kind: parquet, path: x}
tenants:
  - name: "Bad Name"
    namespaces: [ok-ns]
  - name: fine
    namespaces: [other]
  - name: also-bad
    namespaces:
      - Not_A_Namespace
"""


def test_every_problem_is_reported_with_its_place_and_line() -> None:
    problems = problems_of(TWO_BAD_TENANTS)
    assert len(problems) == 2
    places = [place for place, _ in problems]
    assert places[0] == f"tenants[0].name (line {line_of(TWO_BAD_TENANTS, 'Bad Name')})"
    assert places[1] == f"tenants[2].namespaces[0] (line {line_of(TWO_BAD_TENANTS, 'Not_A_Namespace')})"
    assert "Not_A_Namespace" in problems[1][1] and "namespace" in problems[1][1]


def test_problems_are_in_file_order_and_the_message_names_the_file() -> None:
    text = textwrap.dedent(
        """\
        idle_threshold: 2
        clusters:
          - name: a
            source: {kind: parquet, path: x}
        currency: usd
        """
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="cfg.yaml")
    places = [place for place, _ in caught.value.problems]
    assert places == ["idle_threshold (line 1)", "currency (line 5)"]
    assert str(caught.value).splitlines()[0].startswith("cfg.yaml: idle_threshold (line 1): ")
    assert caught.value.source == "cfg.yaml"


def test_unknown_fields_are_rejected_naming_the_field() -> None:
    text = """\
    clusters:
      - name: a
        source: {kind: parquet, path: x, compression: zstd}
    rate_card:
      models:
        - model: H100-80GB
          price_per_hour: 4.1
    tenant:
      - name: x
    """
    problems = dict(problems_of(text))
    assert set(problems) == {
        f"clusters[0].source.compression (line {line_of(text, 'compression')})",
        f"rate_card.models[0].price_per_hour (line {line_of(text, 'price_per_hour')})",
        f"tenant (line {line_of(text, 'tenant:')})",
    }
    assert all("Extra inputs are not permitted" in message for message in problems.values())


def test_a_missing_required_field_points_at_its_parent() -> None:
    text = """\
    clusters:
      - name: a
        source:
          kind: prometheus
          verify_tls: false
    """
    [(place, message)] = problems_of(text)
    assert place == f"clusters[0].source.url (line {line_of(text, 'source:')})"
    assert message == "Field required"


def test_a_config_without_clusters_is_an_error() -> None:
    [(place, message)] = problems_of("pool: p\n")
    assert place.startswith("clusters") and message == "Field required"


def test_an_unknown_source_kind_is_an_error_at_the_source() -> None:
    text = "clusters:\n  - name: a\n    source: {kind: s3, path: x}\n"
    [(place, message)] = problems_of(text)
    assert place == "clusters[0].source (line 3)"
    assert "kind" in message


@pytest.mark.parametrize("reserved", ["__idle__", "__unallocated__"])
def test_reserved_tenant_names_are_rejected(reserved: str) -> None:
    text = f"{MINIMAL}tenants:\n  - name: ok\n  - name: {reserved}\n"
    [(place, message)] = problems_of(text)
    assert place == "tenants[1].name (line 6)"
    assert "reserved" in message and reserved in message


@pytest.mark.parametrize("name", ["idle", "IDLE", "Idle", "idle-", "unallocated", "UNALLOCATED"])
def test_names_that_read_as_a_bucket_are_rejected(name: str) -> None:
    """`idle` on an invoice would be taken for the pool's __idle__ bucket (R7, R9, R14)."""
    [(place, message)] = problems_of(f"{MINIMAL}tenants:\n  - name: ok\n  - name: {name}\n")
    assert place == "tenants[1].name (line 6)"
    bucket = "__idle__" if "idle" in name.lower() else "__unallocated__"
    assert f"tenant name {name!r} reads as the reserved bucket {bucket}" in message


def test_names_that_read_alike_on_invoices_are_rejected_naming_both() -> None:
    text = f"{MINIMAL}tenants:\n  - name: team-a\n  - name: b\n  - name: team.a\n  - name: TEAM_A\n"
    problems = problems_of(text)
    assert [place for place, _ in problems] == ["tenants[2].name (line 7)", "tenants[3].name (line 8)"]
    assert problems[0][1].startswith(
        "tenant 'team.a' reads as TEAM-A on invoices, like tenant 'team-a' (tenants[0]): "
    )
    assert "tenant 'TEAM_A' reads as TEAM-A on invoices, like tenant 'team-a' (tenants[0])" in problems[1][1]
    # Names that only look similar but read differently are fine.
    assert [t.name for t in parse_config(f"{MINIMAL}tenants:\n  - name: team-a\n  - name: team-a2\n").tenants]


def test_duplicate_tenant_names_are_rejected_at_the_repeat_with_the_other_problems() -> None:
    text = f"{MINIMAL}tenants:\n  - name: a\n  - name: b\n    namespaces: [BAD]\n  - name: a\n"
    problems = problems_of(text)
    assert problems == [
        ("tenants[1].namespaces[0] (line 7)", problems[0][1]),
        ("tenants[2].name (line 8)", "tenant 'a' is defined twice (first at tenants[0])"),
    ]


def test_duplicate_tenant_names_alone() -> None:
    [(place, message)] = problems_of(f"{MINIMAL}tenants:\n  - name: a\n  - name: a\n")
    assert place == "tenants[1].name (line 6)" and "defined twice" in message


def test_duplicate_cluster_names_are_rejected() -> None:
    text = MINIMAL + "  - name: a\n    source: {kind: parquet, path: y}\n"
    [(place, message)] = problems_of(text)
    assert place == "clusters[1].name (line 4)" and "cluster 'a' is defined twice" in message


def test_config_model_itself_rejects_duplicates_and_reserved_names() -> None:
    """The same rules hold for a Config built in code, not only for a parsed file."""
    base: dict[str, Any] = {"clusters": [{"name": "a", "source": {"kind": "parquet", "path": "x"}}]}
    with pytest.raises(ValueError, match="defined twice"):
        Config.model_validate({**base, "tenants": [{"name": "t"}, {"name": "t"}]})
    with pytest.raises(ValueError, match="reserved"):
        Config.model_validate({**base, "tenants": [{"name": "__idle__"}]})
    with pytest.raises(ValueError, match="reads as TEAM-A on invoices, like tenant 'team-a'"):
        Config.model_validate({**base, "tenants": [{"name": "team-a"}, {"name": "Team.A"}]})
    with pytest.raises(ValueError, match="reserved bucket __idle__"):
        Config.model_validate({**base, "tenants": [{"name": "idle"}]})


def test_mig_profile_prices_name_the_bad_profile() -> None:
    text = """\
    clusters:
      - name: a
        source: {kind: parquet, path: x}
    rate_card:
      models:
        - model: A100-80GB
          price_per_gpu_hour: 2.5
          mig_profiles:
            1g.10gb: 0.4
            big-slice: 1.0
            3g.40gb: -1
    """
    problems = problems_of(text)
    assert [place for place, _ in problems] == [
        f"rate_card.models[0].mig_profiles.big-slice (line {line_of(text, 'big-slice')})",
        f"rate_card.models[0].mig_profiles.3g.40gb (line {line_of(text, '3g.40gb')})",
    ]
    assert "does not parse as <N>g.<M>gb" in problems[0][1]
    assert "greater than or equal to 0" in problems[1][1]


def test_mig_catalog_slices_are_checked() -> None:
    text = f"{MINIMAL}rate_card:\n  mig_catalog:\n    - family: X\n      models: ['*X*']\n      profiles: {{1g.9gb: [8, 1]}}\n"
    [(place, message)] = problems_of(text)
    assert place.startswith("rate_card.mig_catalog[0].profiles") and "1..7" in message


@pytest.mark.parametrize(
    ("snippet", "place"),
    [
        ("scrape_interval_seconds: 0\n", "scrape_interval_seconds (line 4)"),
        ("idle_policy: spread\n", "idle_policy (line 4)"),
        ("rate_card: {mig_weight: slices}\n", "rate_card.mig_weight (line 4)"),
        ("rate_card: {price_source: aws}\n", "rate_card.price_source (line 4)"),
        ("checks: {min_coverage: 1.5}\n", "checks.min_coverage (line 4)"),
        ("stranded: {min_free_cpu_cores: -1}\n", "stranded.min_free_cpu_cores (line 4)"),
        ("tenants: [{name: t, monthly_budget: -5}]\n", "tenants[0].monthly_budget (line 4)"),
    ],
)
def test_out_of_range_values_are_placed(snippet: str, place: str) -> None:
    [(got, _)] = problems_of(MINIMAL + snippet)
    assert got == place


def test_invalid_yaml_is_one_problem_with_line_and_column() -> None:
    text = "clusters:\n  - name: a\n    source: {kind: parquet, path: x\ntenants: []\n"
    [(place, message)] = problems_of(text)
    assert re.fullmatch(r"line \d+, column \d+", place)
    assert message.startswith("not valid YAML")


def test_invalid_yaml_bad_indentation_line() -> None:
    text = "pool: p\nclusters:\n  - name: a\n   bad: [\n"
    [(place, _)] = problems_of(text)
    assert place.startswith("line ")


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_a_file_that_is_not_a_mapping_is_an_error(text: str) -> None:
    [(place, message)] = problems_of(text)
    assert place == "" and "mapping" in message


def test_a_missing_file_is_a_clear_message(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert str(caught.value).startswith(f"{missing}: file not found")


def test_a_directory_is_a_clear_message(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_load_config_names_the_file_in_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(TWO_BAD_TENANTS)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    lines = str(caught.value).splitlines()
    assert len(lines) == 2 and all(line.startswith(f"{path}: tenants[") for line in lines)


# --- relative paths --------------------------------------------------------------------------


def test_relative_paths_are_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "etc" / "gpumeter"
    conf_dir.mkdir(parents=True)
    path = conf_dir / "config.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            clusters:
              - name: a
                source: {{kind: parquet, path: ../data/source}}
              - name: b
                source:
                  kind: prometheus
                  url: http://prom:9090
                  claims_file: dra/claims.json
                  slices_file: {tmp_path}/abs/slices.json
                  kubeconfig: ~/.kube/config
              - name: c
                source: {{kind: parquet, path: "s3://bucket/raw"}}
            warehouse: {{path: wh}}
            """
        )
    )
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    config = load_config(Path("etc/gpumeter/config.yaml"))
    a, b, c = (cluster.source for cluster in config.clusters)
    assert isinstance(a, ParquetSource) and isinstance(b, PrometheusSource) and isinstance(c, ParquetSource)
    assert a.path == str((tmp_path / "etc" / "data" / "source").resolve())
    assert b.claims_file == str((conf_dir / "dra" / "claims.json").resolve())
    assert b.slices_file == f"{tmp_path}/abs/slices.json"  # absolute stays
    assert b.kubeconfig == str(
        Path("~/.kube/config").expanduser()
    )  # home-relative is expanded, not re-rooted
    assert b.url == "http://prom:9090"
    assert c.path == "s3://bucket/raw"  # URLs are left alone
    assert config.warehouse.path == str((conf_dir / "wh").resolve())


def test_the_example_paths_are_beside_the_config_it_is_copied_to(tmp_path: Path) -> None:
    """Relative paths are relative to the config file: the example copied into a folder reads the source and
    warehouse of that folder (what `gpumeter demo` relies on)."""
    copy = tmp_path / "config.yaml"
    copy.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    config = load_config(copy)
    source = config.clusters[0].source
    assert isinstance(source, ParquetSource)
    assert source.path == str(tmp_path / "source")
    assert config.warehouse.path == str(tmp_path / "warehouse")


def test_parse_config_without_a_base_dir_keeps_paths_as_written() -> None:
    source = parse_config(MINIMAL).clusters[0].source
    assert isinstance(source, ParquetSource) and source.path == "x"


# --- warnings (R7 overlaps, missing prices) --------------------------------------------------


def test_overlapping_namespace_globs_warn_naming_the_winner() -> None:
    warnings = warnings_of(
        MINIMAL
        + "tenants:\n  - name: training\n    namespaces: [train, 'ft-*']\n  - name: llama\n    namespaces: [ft-llama]\n"
    )
    [(place, message)] = warnings
    assert place == "tenants[1].namespaces[0]"
    assert (
        "'ft-llama' overlaps 'ft-*'" in message
        and "'training'" in message
        and "tenants[0].namespaces[1]" in message
    )


def test_overlap_is_reported_whichever_comes_first() -> None:
    warnings = warnings_of(
        MINIMAL + "tenants:\n  - {name: a, namespaces: [ft-llama]}\n  - {name: b, namespaces: ['ft-*']}\n"
    )
    assert [place for place, _ in warnings] == ["tenants[1].namespaces[0]"]


@pytest.mark.parametrize(
    ("first", "second", "overlap"),
    [
        ("ft-*", "ft-llama", True),
        ("ft-*", "ft-l*", True),
        ("ft-*", "serve-*", False),
        ("train", "training", False),
        ("team-?", "team-a", True),
        ("team-?", "team-ab", False),
        ("prod", "prod", True),
    ],
)
def test_namespace_overlap_detection(first: str, second: str, overlap: bool) -> None:
    text = (
        MINIMAL
        + f"tenants:\n  - {{name: a, namespaces: ['{first}']}}\n  - {{name: b, namespaces: ['{second}']}}\n"
    )
    assert bool(warnings_of(text)) is overlap


def test_price_changes_must_be_in_date_order_and_gpu_prices_need_the_rate_card() -> None:
    model = "rate_card:\n  {source}models:\n    - model: H100-80GB\n      price_per_gpu_hour: 3.6\n"
    changes = (
        "      price_changes:\n"
        "        - {effective_from: 2026-11-15, price_per_gpu_hour: 4.0}\n"
        "        - {effective_from: 2026-11-15, price_per_gpu_hour: 4.2}\n"
    )
    [(place, message)] = problems_of(MINIMAL + model.format(source="") + changes)
    assert place.startswith("rate_card.models[0].price_changes")
    assert "effective_from 2026-11-15 follows 2026-11-15" in message and "date order" in message
    opencost = model.format(source="price_source: opencost\n  ") + changes.replace(
        "11-15, price_per_gpu_hour: 4.2", "12-01, price_per_gpu_hour: 4.2"
    )
    [(_, message)] = problems_of(MINIMAL + opencost)
    assert "price_changes" in message and "price_source is opencost" in message
    # A model priced from a day on only: the days before it stop, and the check says from when.
    later_only = (
        MINIMAL + "rate_card:\n  models:\n    - model: H100-80GB\n      price_changes:\n"
        "        - {effective_from: 2026-11-15, price_per_gpu_hour: 4.0}\n"
    )
    [(place, message)] = warnings_of(later_only)
    assert place == "rate_card.models[0].price_per_gpu_hour" and "no price before 2026-11-15" in message
    energy = (
        MINIMAL + "rate_card:\n  energy_price_per_kwh: 0.3\n  energy_price_changes:\n"
        "    - {effective_from: 2026-12-01, price_per_kwh: 0.4}\n"
        "    - {effective_from: 2026-11-01, price_per_kwh: null}\n"
    )
    [(place, message)] = problems_of(energy)
    assert place.startswith("rate_card.energy_price_changes")
    assert "effective_from 2026-11-01 follows 2026-12-01" in message


def test_dated_tenant_rules_need_a_period_that_holds_a_day_and_a_rule() -> None:
    """R7: each dated rule set gives from, until or both (until after from), and names at least one rule."""
    tenant = MINIMAL + "tenants:\n  - name: a\n    dated_rules:\n      - RULES\n"
    [(place, message)] = problems_of(tenant.replace("RULES", "{namespaces: [llm]}"))
    assert (
        place == "tenants[0].dated_rules[0] (line 7)"
        and "give effective_from, effective_until or both" in message
    )
    [(place, message)] = problems_of(
        tenant.replace(
            "RULES", "{effective_from: 2026-12-15, effective_until: 2026-12-15, namespaces: [llm]}"
        )
    )
    assert place == "tenants[0].dated_rules[0] (line 7)"
    assert "effective_until 2026-12-15 is not after effective_from 2026-12-15" in message
    [(place, message)] = problems_of(tenant.replace("RULES", "{effective_from: 2026-12-15}"))
    assert "names no namespace, vCluster or pod label rule" in message
    [(place, _)] = problems_of(
        tenant.replace("RULES", "{effective_from: 2026-12-15, namespaces: [Not_A_Namespace]}")
    )
    assert place == "tenants[0].dated_rules[0].namespaces[0] (line 7)"


def test_dated_rules_warn_of_an_overlap_only_on_the_days_both_are_in_effect() -> None:
    """A hand-over (a's rule until the day b's starts) overlaps on no day; a rule left in a's rules for every
    day, or periods that share a day, do, and the warning names the later tenant's dated rule."""
    hand_over = (
        MINIMAL + "tenants:\n"
        "  - name: a\n    namespaces: [ns-a]\n"
        "    dated_rules: [{effective_until: 2026-12-15, namespaces: [llm], vclusters: [vc]}]\n"
        "  - name: b\n"
        "    dated_rules: [{effective_from: 2026-12-15, namespaces: ['ll*'], vclusters: [vc]}]\n"
    )
    assert warnings_of(hand_over) == []
    shared_day = hand_over.replace("effective_from: 2026-12-15", "effective_from: 2026-12-14")
    assert [place for place, _ in warnings_of(shared_day)] == [
        "tenants[1].dated_rules[0].namespaces[0]",
        "tenants[1].dated_rules[0].vclusters[0]",
    ]
    left_behind = hand_over.replace("namespaces: [ns-a]", "namespaces: [ns-a, llm]")
    [(place, message)] = warnings_of(left_behind)
    assert place == "tenants[1].dated_rules[0].namespaces[0]"
    assert "'ll*' overlaps 'llm' of tenant 'a' (tenants[0].namespaces[1])" in message


def test_duplicated_vclusters_warn() -> None:
    warnings = warnings_of(
        MINIMAL + "tenants:\n  - {name: a, vclusters: [x, eval]}\n  - {name: b, vclusters: [eval]}\n"
    )
    [(place, message)] = warnings
    assert place == "tenants[1].vclusters[0]" and "'eval'" in message and "'a'" in message


def test_overlapping_label_rules_warn_even_when_keys_are_spelt_differently() -> None:
    text = (
        MINIMAL
        + "tenants:\n"
        + "  - name: a\n    pod_labels: [{key: app.kubernetes.io/team, value: 'ml-*'}]\n"
        + "  - name: b\n    pod_labels: [{key: label_app_kubernetes_io_team, value: ml-vision}, {key: team, value: x}]\n"
    )
    [(place, message)] = warnings_of(text)
    assert place == "tenants[1].pod_labels[0]" and "'a'" in message


def test_label_rules_on_different_keys_or_values_do_not_warn() -> None:
    text = (
        MINIMAL
        + "tenants:\n"
        + "  - {name: a, pod_labels: [{key: team, value: research}]}\n"
        + "  - {name: b, pod_labels: [{key: team, value: serving}, {key: owner, value: research}]}\n"
    )
    assert warnings_of(text) == []


def test_rules_of_different_kinds_do_not_warn() -> None:
    """Across kinds R7's precedence decides; only overlaps within one kind are ambiguous."""
    text = (
        MINIMAL
        + "tenants:\n  - {name: a, namespaces: [ns]}\n  - {name: b, vclusters: [ns], pod_labels: [{key: ns, value: ns}]}\n"
    )
    assert warnings_of(text) == []


def test_a_model_without_a_price_warns_under_rate_card_only() -> None:
    text = MINIMAL + "rate_card:\n  models: [{model: L40S}]\n"
    [(place, message)] = warnings_of(text)
    assert place == "rate_card.models[0].price_per_gpu_hour" and "stop the run" in message
    assert warnings_of(MINIMAL + "rate_card:\n  price_source: opencost\n  models: [{model: L40S}]\n") == []


# --- JSON Schema -----------------------------------------------------------------------------


def test_json_schema_is_valid_json_with_the_top_level_properties() -> None:
    schema = json.loads(json.dumps(config_schema()))
    assert set(schema["properties"]) == set(Config.model_fields)
    assert schema["required"] == ["clusters"]
    assert schema["additionalProperties"] is False
    for name in (
        "Cluster",
        "ParquetSource",
        "PrometheusSource",
        "RateCard",
        "GpuModelPrice",
        "MigFamily",
        "Tenant",
    ):
        assert name in schema["$defs"]
    assert schema["$defs"]["Tenant"]["additionalProperties"] is False


def test_json_schema_validates_the_example_if_jsonschema_is_installed() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    jsonschema.validate(yaml.safe_load(EXAMPLE.read_text()), config_schema())


# --- the CLI ---------------------------------------------------------------------------------


def test_cli_config_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    main = _cli_main()
    assert main(["config", "check", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "4 tenant(s)" in out


def test_cli_config_check_prints_warnings_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = _cli_main()
    path = tmp_path / "c.yaml"
    path.write_text(
        MINIMAL + "tenants:\n  - {name: a, namespaces: ['ft-*']}\n  - {name: b, namespaces: [ft-x]}\n"
    )
    assert main(["config", "check", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich may wrap long lines
    assert "warning" in out and "tenants[1].namespaces[0]" in out and "1 warning(s)" in out


def test_cli_config_check_errors_exit_2_naming_file_and_places(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = _cli_main()
    path = tmp_path / "bad.yaml"
    path.write_text(TWO_BAD_TENANTS)
    assert main(["config", "check", str(path)]) == 2
    captured = capsys.readouterr()
    assert "ok" not in captured.out
    err = captured.err
    assert f"{path}: tenants[0].name (line {line_of(TWO_BAD_TENANTS, 'Bad Name')})" in err
    assert f"{path}: tenants[2].namespaces[0] (line {line_of(TWO_BAD_TENANTS, 'Not_A_Namespace')})" in err


def test_cli_config_check_refuses_tenants_that_read_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = _cli_main()
    path = tmp_path / "alike.yaml"
    path.write_text(MINIMAL + "tenants:\n  - name: team-a\n  - name: TEAM_A\n  - name: idle\n")
    assert main(["config", "check", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"{path}: tenants[1].name (line 6): tenant 'TEAM_A' reads as TEAM-A on invoices, like tenant 'team-a' (tenants[0])"
        in err
    )
    assert (
        f"{path}: tenants[2].name (line 7): tenant name 'idle' reads as the reserved bucket __idle__" in err
    )


def test_cli_config_check_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = _cli_main()
    missing = tmp_path / "missing.yaml"
    assert main(["config", "check", str(missing)]) == 2
    assert f"{missing}: file not found" in capsys.readouterr().err


def test_cli_config_check_invalid_yaml_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = _cli_main()
    path = tmp_path / "broken.yaml"
    path.write_text("clusters: [\n")
    assert main(["config", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "not valid YAML" in err and "line 2" in err


def test_cli_config_schema_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    main = _cli_main()
    assert main(["config", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == config_schema()


# --- docs/config.md stays true to the code ---------------------------------------------------


def _models() -> list[type[BaseModel]]:
    return [
        value
        for value in vars(config_module).values()
        if isinstance(value, type)
        and issubclass(value, BaseModel)
        and value.__module__ == config_module.__name__
        and not value.__name__.startswith("_")
    ]


def test_docs_name_every_model_and_every_field() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    models = _models()
    assert {m.__name__ for m in models} >= {
        "Config", "Cluster", "ParquetSource", "PrometheusSource", "RateCard", "GpuModelPrice",
        "MigFamily", "Tenant", "PodLabelRule", "Warehouse", "Stranded", "Checks",
    }  # fmt: skip
    missing = [
        f"{model.__name__}.{field}"
        for model in models
        for field in model.model_fields
        if not re.search(rf"`{re.escape(field)}`", docs)
    ]
    assert missing == [], f"docs/config.md does not document: {missing}"
    assert [m.__name__ for m in models if not re.search(rf"\b{m.__name__}\b", docs)] == []


def test_docs_state_the_defaults_of_the_code() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    for model in _models():
        for name, field in model.model_fields.items():
            default = field.get_default(call_default_factory=True)
            if isinstance(default, bool | int | float | str) and not isinstance(default, BaseModel):
                shown = (
                    {True: "true", False: "false"}.get(default, default)
                    if isinstance(default, bool)
                    else default
                )
                row = [line for line in docs.splitlines() if line.startswith(f"| `{name}`")]
                assert row, f"no table row for {model.__name__}.{name}"
                assert any(f"`{shown}`" in line for line in row), (
                    f"{model.__name__}.{name}: default {shown!r}"
                )


def test_the_annotated_example_in_the_docs_parses_and_sets_every_top_level_field() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    section = docs.split("## A complete, annotated example", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    config = parse_config(block.group(1))
    assert set(config.model_fields_set) == set(Config.model_fields)
    assert config_warnings(config) == []
    assert [t.name for t in config.tenants] == ["research", "evaluation", "ml-training", "serving"]


def test_every_yaml_snippet_in_the_docs_is_valid_yaml() -> None:
    import yaml

    for block in re.findall(r"```yaml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S):
        yaml.safe_load(block)
