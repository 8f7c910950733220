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


# --- what the config refuses of its text (docs/config.md, "What the config refuses") --------------

# The classic billion laughs: nine levels of nine aliases, 9^9 (387 M) strings once expanded. Were it ever
# expanded, this test would run out of memory instead of failing.
BILLION_LAUGHS = 'lol: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"lol{level}: &{chr(97 + level)} [{', '.join([f'*{chr(96 + level)}'] * 9)}]\n" for level in range(1, 9)
)


def test_the_billion_laughs_is_the_classic_one() -> None:
    lines = BILLION_LAUGHS.splitlines()
    assert len(lines) == 9
    assert lines[1] == "lol1: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]"
    assert lines[8] == "lol8: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]"


def test_an_alias_bomb_is_refused_at_its_first_alias_before_expanding_it() -> None:
    [(place, message)] = problems_of(BILLION_LAUGHS)
    assert place == "lol1[0] (line 2)"
    assert message.startswith("YAML alias *a: the config refuses aliases")
    assert "write the value out in full" in message


def test_any_alias_is_refused_naming_the_field_and_line() -> None:
    text = f"{MINIMAL}tenants:\n  - name: a\n    namespaces: &ns [ml-a]\n  - name: b\n    namespaces: *ns\n"
    [(place, message)] = problems_of(text)
    assert place == "tenants[1].namespaces (line 8)"
    assert "YAML alias *ns" in message and "remove the anchor &ns" in message


def test_a_merge_key_is_refused() -> None:
    text = f"{MINIMAL}checks:\n  <<: {{min_coverage: 0.5}}\n  min_coverage: 0.9\n"
    [(place, message)] = problems_of(text)
    assert place == "checks.<< (line 5)" and "merge key" in message


def test_a_top_level_key_given_twice_is_refused_naming_both_lines() -> None:
    text = f"pool: p\ncurrency: USD\n{MINIMAL}currency: EUR\n"
    [(place, message)] = problems_of(text)
    assert place == "currency (line 6)"
    assert "'currency' is given twice in one mapping, at line 2 and again at line 6" in message


def test_a_nested_key_given_twice_is_refused_naming_both_lines() -> None:
    text = """\
    clusters:
      - name: a
        source: {kind: parquet, path: x}
    rate_card:
      models:
        - model: H100-80GB
          price_per_gpu_hour: 2.5
          mig_profiles: {1g.10gb: 0.4, 1g.10gb: 0.5}
          price_per_gpu_hour: 25
    """
    problems = problems_of(text)
    first, repeat = line_of(text, "price_per_gpu_hour: 2.5"), line_of(text, "price_per_gpu_hour: 25")
    assert problems == [
        (
            f"rate_card.models[0].mig_profiles.1g.10gb (line {line_of(text, 'mig_profiles')})",
            problems[0][1],
        ),
        (
            f"rate_card.models[0].price_per_gpu_hour (line {repeat})",
            f"'price_per_gpu_hour' is given twice in one mapping, at line {first} and again at line {repeat}; "
            "YAML would silently keep the last one: keep one",
        ),
    ]


def test_keys_that_read_as_one_are_one_key() -> None:
    """YAML 1.1 reads `yes` and `true` as one boolean key: a repeat, though spelt differently."""
    [(place, message)] = problems_of(f"{MINIMAL}query_params:\n  yes: 1\n  true: 2\n")
    assert place == "query_params.true (line 6)" and "at line 5 and again at line 6" in message


@pytest.mark.parametrize(
    ("snippet", "place"),
    [
        ("rate_card:\n  models:\n    - model: H\n      price_per_gpu_hour: .inf\n", "rate_card.models[0].price_per_gpu_hour"),
        ("rate_card:\n  energy_price_per_kwh: -.inf\n", "rate_card.energy_price_per_kwh"),
        ("idle_threshold: .nan\n", "idle_threshold"),
        ("tenants:\n  - name: t\n    monthly_budget: .NaN\n", "tenants[0].monthly_budget"),
        ("rate_card:\n  models:\n    - model: H\n      mig_profiles: {1g.10gb: .inf}\n", "rate_card.models[0].mig_profiles.1g.10gb"),
        ("stranded: {min_free_memory_gib: .inf}\n", "stranded.min_free_memory_gib"),
        ("alerts: {thresholds: [0.8, .nan]}\n", "alerts.thresholds[1]"),
        ("clusters:\n  - name: b\n    source: {kind: prometheus, url: 'http://p', timeout_seconds: .inf}\n", "clusters[0].source.timeout_seconds"),
    ],
)  # fmt: skip
def test_numbers_that_are_not_finite_are_refused(snippet: str, place: str) -> None:
    text = snippet if snippet.startswith("clusters") else MINIMAL + snippet
    [(got, message)] = problems_of(text)
    assert got == f"{place} (line {len(text.splitlines())})"  # each value is on the last line
    assert "is not a finite number" in message and ".inf and .nan are refused" in message


@pytest.mark.parametrize("written", ["1e12", "1.0e+12", "1000000000000", "1000000001"])
def test_a_price_past_the_bound_is_refused(written: str) -> None:
    """YAML 1.1 reads `1e12` (no dot) as a string; pydantic then reads the number: refused all the same."""
    text = f"{MINIMAL}rate_card:\n  models:\n    - model: H100-80GB\n      price_per_gpu_hour: {written}\n"
    [(place, message)] = problems_of(text)
    assert place == "rate_card.models[0].price_per_gpu_hour (line 7)"
    assert (
        "is more than 1,000,000,000, the most a price (per GPU-hour, MIG instance-hour or kWh) may be"
        in message
    )


def test_every_price_and_the_budget_are_bounded() -> None:
    text = """\
    clusters:
      - name: a
        source: {kind: parquet, path: x}
    rate_card:
      energy_price_per_kwh: 2.0e+9
      energy_price_changes:
        - {effective_from: 2026-01-01, price_per_kwh: 2.0e+9}
      models:
        - model: A100-80GB
          mig_profiles: {1g.10gb: 2.0e+9}
          price_changes:
            - {effective_from: 2026-01-01, price_per_gpu_hour: 2.0e+9}
    tenants:
      - name: t
        monthly_budget: 2.0e+15
    """
    problems = problems_of(text)
    assert [place.split(" (")[0] for place, _ in problems] == [
        "rate_card.energy_price_per_kwh",
        "rate_card.energy_price_changes[0].price_per_kwh",
        "rate_card.models[0].mig_profiles.1g.10gb",
        "rate_card.models[0].price_changes[0].price_per_gpu_hour",
        "tenants[0].monthly_budget",
    ]
    assert (
        "the most a monthly budget may be" in problems[-1][1] and "1,000,000,000,000,000" in problems[-1][1]
    )
    # At the bounds, accepted.
    at_bounds = text.replace("2.0e+9", "1.0e+9").replace("2.0e+15", "1.0e+15")
    assert parse_config(textwrap.dedent(at_bounds)).tenants[0].monthly_budget == 1e15


@pytest.mark.parametrize(
    ("snippet", "place"),
    [
        ("kube_lookback_seconds: 86401\n", "kube_lookback_seconds"),
        ("kube_lookback_seconds: " + "9" * 400 + "\n", "kube_lookback_seconds"),
        ("stranded: {min_free_cpu_cores: 1.0e+6}\n", "stranded.min_free_cpu_cores"),
        ("stranded: {min_free_memory_gib: 1.0e+7}\n", "stranded.min_free_memory_gib"),
    ],
)
def test_sizes_and_times_are_bounded(snippet: str, place: str) -> None:
    [(got, message)] = problems_of(MINIMAL + snippet)
    assert got == f"{place} (line 4)" and "less than or equal to" in message


def test_a_5000_character_tenant_name_is_refused_without_printing_it() -> None:
    [(place, message)] = problems_of(f"{MINIMAL}tenants:\n  - name: {'t' * 5000}\n")
    assert place == "tenants[0].name (line 5)"
    assert "a value of 5,000 characters" in message and "a name at most 63" in message
    assert "t" * 100 not in message


@pytest.mark.parametrize(("section", "what"), [("tenants", "tenant name"), ("clusters", "cluster name")])
def test_a_name_longer_than_63_characters_is_refused(section: str, what: str) -> None:
    name = "n" * 64
    if section == "tenants":
        text = f"{MINIMAL}tenants:\n  - name: {name}\n"
        place = "tenants[0].name (line 5)"
    else:
        text = f"clusters:\n  - name: {name}\n    source: {{kind: parquet, path: x}}\n"
        place = "clusters[0].name (line 2)"
    [(got, message)] = problems_of(text)
    assert got == place
    assert f"{what} 'nnnnnnnnnnnnnnnnnnnnnnnn…' is 64 characters long; at most 63 are accepted" in message
    # 63 characters are fine.
    assert parse_config(text.replace(name, name[:63]))


@pytest.mark.parametrize(
    ("name", "shown"), [("team/a", "'/'"), ("'team\\a'", "'\\\\'"), ('"team\\0a"', "'\\x00'"), ("../x", "")]
)
def test_a_name_that_would_make_a_folder_or_end_a_file_name_is_refused(name: str, shown: str) -> None:
    [(place, message)] = problems_of(f"{MINIMAL}tenants:\n  - name: {name}\n")
    assert place == "tenants[0].name (line 5)"
    assert "may hold only letters, digits, '.', '_' and '-'" in message
    assert "it becomes part of file and folder names" in message
    assert shown in message


def test_a_cluster_name_with_a_slash_is_refused() -> None:
    [(place, message)] = problems_of("clusters:\n  - name: prod/a\n    source: {kind: parquet, path: x}\n")
    assert place == "clusters[0].name (line 2)" and "cluster name 'prod/a' may hold only" in message


@pytest.mark.parametrize(
    ("snippet", "place", "said"),
    [
        ("pool: " + "p" * 129 + "\n", "pool (line 4)", "at most 128 are accepted, as it is printed on invoices"),
        ("tenants:\n  - {name: t, cost_center: '" + "c" * 129 + "'}\n", "tenants[0].cost_center (line 5)", "at most 128"),
        ("tenants:\n  - {name: t, cost_center: \"CC\\n42\"}\n", "tenants[0].cost_center (line 5)", "control character"),
        ("rate_card:\n  models:\n    - model: \"H100\\0\"\n", "rate_card.models[0].model (line 6)", "control character"),
    ],
)  # fmt: skip
def test_texts_printed_on_invoices_are_bounded(snippet: str, place: str, said: str) -> None:
    [(got, message)] = problems_of(MINIMAL + snippet)
    assert got == place and said in message


def test_any_value_is_at_most_4096_characters() -> None:
    [(place, message)] = problems_of(f"{MINIMAL}warehouse:\n  path: {'x' * 4097}\n")
    assert place == "warehouse.path (line 5)" and "refuses any value over 4,096" in message
    assert parse_config(f"{MINIMAL}warehouse:\n  path: {'x' * 4096}\n").warehouse.path == "x" * 4096


def test_nesting_past_any_field_is_refused_not_a_recursion_error() -> None:
    [(place, message)] = problems_of(f"{MINIMAL}pool: {'[' * 5000}{']' * 5000}\n")
    assert place.startswith("pool[0]") and place.endswith("(line 4)")
    assert "nested more than 20 levels deep" in message


def test_a_config_past_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(MINIMAL + "#" * config_module.MAX_CONFIG_CHARS + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [
        ("", f"is longer than 4,194,304 characters, the most a config may be ({config_module.REFUSES})")
    ]


def test_a_scalar_yaml_cannot_read_is_a_problem_not_a_crash() -> None:
    text = f"{MINIMAL}tenants:\n  - name: t\n    dated_rules:\n      - {{effective_from: 0000-01-01, namespaces: [a]}}\n"
    [(place, message)] = problems_of(text)
    assert place == "tenants[0].dated_rules[0].effective_from (line 7)"
    assert "'0000-01-01' is not a value YAML can read: year 0 is out of range" in message


def test_a_config_built_in_code_is_bounded_too() -> None:
    base: dict[str, Any] = {"clusters": [{"name": "a", "source": {"kind": "parquet", "path": "x"}}]}
    with pytest.raises(ValueError, match="finite number"):
        Config.model_validate({**base, "idle_threshold": float("nan")})
    with pytest.raises(ValueError, match="less than or equal to 1000000000"):
        Config.model_validate({**base, "rate_card": {"energy_price_per_kwh": 1e12}})
    with pytest.raises(ValueError, match="at most 63 are accepted"):
        Config.model_validate({**base, "tenants": [{"name": "t" * 64}]})


def test_the_example_config_is_within_every_bound() -> None:
    """The shipped example keeps passing (no aliases, no repeated keys, every value within its bound)."""
    assert load_config(EXAMPLE).pool == "demo-ai-factory"


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


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (BILLION_LAUGHS, "lol1[0] (line 2): YAML alias *a: the config refuses aliases"),
        (f"currency: USD\n{MINIMAL}currency: EUR\n", "currency (line 5): 'currency' is given twice in one mapping, at line 1 and again at line 5"),
        (f"{MINIMAL}rate_card: {{energy_price_per_kwh: .inf}}\n", "rate_card.energy_price_per_kwh (line 4): inf is not a finite number"),
        (f"{MINIMAL}tenants:\n  - name: {'t' * 5000}\n", "tenants[0].name (line 5): a value of 5,000 characters"),
        (f"{MINIMAL}tenants:\n  - name: team/a\n", "tenants[0].name (line 5): tenant name 'team/a' may hold only"),
    ],
)  # fmt: skip
def test_cli_config_check_refuses_unbounded_text_with_one_line_and_exit_2(
    text: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = _cli_main()
    path = tmp_path / "refused.yaml"
    path.write_text(text)
    assert main(["config", "check", str(path)]) == 2
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())  # rich may wrap long lines
    assert captured.out == "" and "Traceback" not in err
    assert err.startswith(f"error: {path}: {said}")
    assert err.count(f"{path}: ") == 1  # one problem, one line


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
        and value.__module__.startswith(f"{config_module.__name__}.")
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
