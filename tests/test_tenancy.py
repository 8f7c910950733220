"""R7 tenant resolution: pod label rules > vCluster > namespace; file order within a kind; `__unallocated__`."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumeter.config import UNALLOCATED, Config, PodLabelRule
from gpumeter.models.tenancy import VCLUSTER_LABEL, resolve_tenant

VC = VCLUSTER_LABEL


def make(tenants: list[dict[str, Any]]) -> Config:
    return Config.model_validate(
        {"clusters": [{"name": "a", "source": {"kind": "parquet", "path": "x"}}], "tenants": tenants}
    )


TENANTS: list[dict[str, Any]] = [
    {"name": "by-namespace", "cost_center": "CC-1", "namespaces": ["training", "ft-*"]},
    {"name": "by-vcluster", "cost_center": "CC-2", "vclusters": ["eval-vc"]},
    {"name": "by-label", "cost_center": "CC-3", "pod_labels": [{"key": "team", "value": "research"}]},
]


def who(config: Config, namespace: str, labels: dict[str, str] | None = None) -> tuple[str, str]:
    match = resolve_tenant(config, namespace, labels or {})
    return match.tenant, match.rule


def test_each_rule_kind_on_its_own() -> None:
    config = make(TENANTS)
    assert who(config, "training") == ("by-namespace", "namespace")
    assert who(config, "x", {VC: "eval-vc"}) == ("by-vcluster", "vcluster")
    assert who(config, "x", {"label_team": "research"}) == ("by-label", "pod_label")
    match = resolve_tenant(config, "training", {})
    assert match.cost_center == "CC-1"


def test_pod_label_beats_vcluster_beats_namespace_whatever_the_file_order() -> None:
    """The namespace tenant comes first in the file, yet the more specific kinds win (R7)."""
    config = make(TENANTS)
    everything = {"label_team": "research", VC: "eval-vc"}
    assert who(config, "training", everything) == ("by-label", "pod_label")
    assert who(config, "training", {VC: "eval-vc"}) == ("by-vcluster", "vcluster")
    assert who(config, "training", {"label_team": "other", VC: "eval-vc"}) == ("by-vcluster", "vcluster")
    assert who(config, "training", {"label_team": "other", VC: "other-vc"}) == ("by-namespace", "namespace")


def test_first_tenant_in_file_order_wins_within_a_kind() -> None:
    config = make(
        [
            {"name": "glob-first", "namespaces": ["ft-*"]},
            {"name": "exact-later", "namespaces": ["ft-llama"]},
            {"name": "label-1", "pod_labels": [{"key": "team", "value": "ml-*"}]},
            {"name": "label-2", "pod_labels": [{"key": "team", "value": "ml-vision"}]},
            {"name": "vc-1", "vclusters": ["shared"]},
            {"name": "vc-2", "vclusters": ["shared"]},
        ]
    )
    assert who(config, "ft-llama") == ("glob-first", "namespace")  # an exact name later in the file loses
    assert who(config, "x", {"label_team": "ml-vision"}) == ("label-1", "pod_label")
    assert who(config, "x", {VC: "shared"}) == ("vc-1", "vcluster")


def test_first_matching_rule_across_tenants_not_across_keys() -> None:
    """Within pod label rules, tenant order decides, not the order of label keys on the pod."""
    config = make(
        [
            {"name": "owner", "pod_labels": [{"key": "owner", "value": "alice"}]},
            {"name": "team", "pod_labels": [{"key": "team", "value": "research"}]},
        ]
    )
    assert who(config, "x", {"label_team": "research", "label_owner": "alice"})[0] == "owner"
    assert who(config, "x", {"label_team": "research", "label_owner": "bob"})[0] == "team"


@pytest.mark.parametrize(
    ("pattern", "namespace", "matches"),
    [
        ("ft-*", "ft-llama", True),
        ("ft-*", "ft-", True),
        ("ft-*", "aft-x", False),
        ("team-?", "team-a", True),
        ("team-?", "team-ab", False),
        ("team-[ab]", "team-b", True),
        ("team-[!ab]", "team-b", False),
        ("team-[!ab]", "team-c", True),
        ("training", "training", True),
        ("training", "training-2", False),
        ("*", "anything", True),
    ],
)
def test_namespace_globs(pattern: str, namespace: str, matches: bool) -> None:
    config = make([{"name": "t", "namespaces": [pattern]}])
    assert (who(config, namespace)[0] == "t") is matches


def test_label_value_globs_are_case_sensitive() -> None:
    config = make([{"name": "t", "pod_labels": [{"key": "team", "value": "ml-*"}]}])
    assert who(config, "x", {"label_team": "ml-vision"})[0] == "t"
    assert who(config, "x", {"label_team": "ML-vision"})[0] == UNALLOCATED


@pytest.mark.parametrize(
    ("key", "metric_label"),
    [
        ("team", "label_team"),
        ("app.kubernetes.io/team", "label_app_kubernetes_io_team"),
        ("example.com/cost-center", "label_example_com_cost_center"),
        ("vcluster.loft.sh/managed-by", VC),
        ("teamName", "label_team_name"),  # kube-state-metrics snake-cases and lowercases keys
        ("Team", "label_team"),
        ("label_team", "label_team"),  # already sanitized: used as is
        ("label_app_kubernetes_io_team", "label_app_kubernetes_io_team"),
    ],
)
def test_label_keys_are_sanitized_like_kube_state_metrics(key: str, metric_label: str) -> None:
    assert PodLabelRule(key=key, value="v").metric_label == metric_label


def test_a_kubernetes_label_key_matches_the_sanitized_series_label() -> None:
    config = make([{"name": "t", "pod_labels": [{"key": "app.kubernetes.io/team", "value": "vision"}]}])
    assert who(config, "x", {"label_app_kubernetes_io_team": "vision"}) == ("t", "pod_label")
    assert (
        who(config, "x", {"app.kubernetes.io/team": "vision"})[0] == UNALLOCATED
    )  # raw keys are not series labels


def test_vclusters_are_exact_names() -> None:
    config = make([{"name": "t", "vclusters": ["eval"]}])
    assert who(config, "x", {VC: "eval"})[0] == "t"
    assert who(config, "x", {VC: "eval-2"})[0] == UNALLOCATED
    assert who(config, "x", {VC: ""})[0] == UNALLOCATED


def test_unmatched_holders_are_unallocated() -> None:
    config = make(TENANTS)
    match = resolve_tenant(config, "kube-system", {"label_team": "platform", VC: "nobody"})
    assert (match.tenant, match.cost_center, match.rule) == (UNALLOCATED, None, "none")
    assert who(make([]), "training") == (UNALLOCATED, "none")


# --- properties ------------------------------------------------------------------------------

NAMES = st.sampled_from(
    ["training", "ft-llama", "ft-x", "inference", "team-a", "team-b", "kube-system", "eval", ""]
)
VALUES = st.sampled_from(["research", "ml-vision", "ml-x", "serving", "eval", "eval-vc", ""])
PATTERNS = st.sampled_from(["training", "ft-*", "ft-llama", "team-?", "team-[ab]", "inference", "*", "eval"])
KEYS = st.sampled_from(["team", "app.kubernetes.io/team", "label_owner", "owner"])
POD_LABEL_KEYS = st.sampled_from(["label_team", "label_app_kubernetes_io_team", "label_owner", VC])

TENANT = st.fixed_dictionaries(
    {
        "namespaces": st.lists(PATTERNS, max_size=3),
        "vclusters": st.lists(VALUES, max_size=2),
        "pod_labels": st.lists(
            st.fixed_dictionaries(
                {"key": KEYS, "value": st.sampled_from(["research", "ml-*", "eval*", "*"])}
            ),
            max_size=2,
        ),
        "cost_center": st.one_of(st.none(), st.sampled_from(["CC-1", "CC-2"])),
    }
)


@st.composite
def configs(draw: st.DrawFn) -> Config:
    tenants = draw(st.lists(TENANT, max_size=5))
    return make([{"name": f"t{i}", **tenant} for i, tenant in enumerate(tenants)])


@settings(max_examples=300, deadline=None)
@given(config=configs(), namespace=NAMES, labels=st.dictionaries(POD_LABEL_KEYS, VALUES, max_size=4))
def test_resolution_is_total_and_deterministic(
    config: Config, namespace: str, labels: dict[str, str]
) -> None:
    """R7: every holder resolves to a configured tenant or `__unallocated__`, never dropped; same input,
    same answer; and the answer agrees with the rule it reports."""
    match = resolve_tenant(config, namespace, labels)
    by_name = {t.name: t for t in config.tenants}
    assert match.tenant in by_name or match.tenant == UNALLOCATED
    assert (
        resolve_tenant(config, namespace, dict(reversed(list(labels.items())))) == match
    )  # label order is no input
    if match.tenant == UNALLOCATED:
        assert (match.rule, match.cost_center) == ("none", None)
        return
    tenant = by_name[match.tenant]
    assert match.cost_center == tenant.cost_center
    assert match.rule in {"pod_label", "vcluster", "namespace"}
    # Precedence: a namespace (or vCluster) answer means no tenant had a matching rule of a higher kind.
    import fnmatch

    def label_hit(t: Any) -> bool:
        return any(
            r.metric_label in labels and fnmatch.fnmatchcase(labels[r.metric_label], r.value)
            for r in t.pod_labels
        )

    def vc_hit(t: Any) -> bool:
        return bool(labels.get(VC)) and labels[VC] in t.vclusters

    def ns_hit(t: Any) -> bool:
        return any(fnmatch.fnmatchcase(namespace, p) for p in t.namespaces)

    hit = {"pod_label": label_hit, "vcluster": vc_hit, "namespace": ns_hit}[match.rule]
    order = ["pod_label", "vcluster", "namespace"]
    higher = order[: order.index(match.rule)]
    assert not any({"pod_label": label_hit, "vcluster": vc_hit}[k](t) for k in higher for t in config.tenants)
    # File order within the kind: the first tenant that matches by this kind.
    assert next(t.name for t in config.tenants if hit(t)) == match.tenant


def test_dated_rules_apply_on_their_utc_days_only_from_inclusive_until_exclusive() -> None:
    """R7: a dated rule set is in effect on [effective_from, effective_until); outside it the tenant's own rules
    alone apply, and a dated rule takes its kind's place in the precedence (a pod label before a namespace)."""
    config = make(
        [
            {"name": "a", "namespaces": ["ns-a"], "dated_rules": [
                {"effective_until": "2026-12-15", "namespaces": ["llm"]},
            ]},
            {"name": "b", "dated_rules": [
                {"effective_from": "2026-12-15", "namespaces": ["llm"]},
                {"effective_from": "2026-12-20", "effective_until": "2026-12-22",
                 "pod_labels": [{"key": "team", "value": "x"}]},
            ]},
        ]
    )  # fmt: skip

    def on(day: date, namespace: str, labels: dict[str, str] | None = None) -> tuple[str, str]:
        match = resolve_tenant(config, namespace, labels or {}, day)
        return match.tenant, match.rule

    assert on(date(2026, 12, 14), "llm") == ("a", "namespace")
    assert on(date(2026, 12, 15), "llm") == ("b", "namespace")
    assert on(date(2027, 1, 1), "llm") == ("b", "namespace")
    x = {"label_team": "x"}
    assert [on(date(2026, 12, d), "ns-a", x)[0] for d in (19, 20, 21, 22)] == ["a", "b", "b", "a"]
    assert on(date(2026, 12, 21), "ns-a", x) == ("b", "pod_label")
    # Without a day, the rules in effect today (UTC).
    today = datetime.now(UTC).date()
    assert resolve_tenant(config, "llm", {}).tenant == ("b" if today >= date(2026, 12, 15) else "a")


DAYS = st.sampled_from([date(2026, 12, d) for d in (1, 10, 14, 15, 16, 31)])
DATED = st.fixed_dictionaries(
    {
        "effective_from": st.one_of(st.none(), DAYS),
        "effective_until": st.one_of(st.none(), DAYS),
        "namespaces": st.lists(PATTERNS, min_size=1, max_size=2),
        "vclusters": st.lists(VALUES, max_size=1),
        "pod_labels": st.lists(
            st.fixed_dictionaries({"key": KEYS, "value": st.sampled_from(["research", "ml-*", "*"])}),
            max_size=1,
        ),
    }
).filter(
    lambda d: (
        (d["effective_from"] or d["effective_until"])
        and not (d["effective_from"] and d["effective_until"] and d["effective_until"] <= d["effective_from"])
    )
)


@settings(max_examples=300, deadline=None)
@given(
    tenants=st.lists(st.tuples(TENANT, st.lists(DATED, max_size=2)), max_size=4),
    day=DAYS,
    namespace=NAMES,
    labels=st.dictionaries(POD_LABEL_KEYS, VALUES, max_size=3),
)
def test_dated_rules_on_a_day_resolve_as_the_rules_in_effect_written_without_dates(
    tenants: list[tuple[dict[str, Any], list[dict[str, Any]]]],
    day: date,
    namespace: str,
    labels: dict[str, str],
) -> None:
    """R7: on any day, a config with dated rules resolves every holder as the config does whose tenants carry,
    undated, their own rules and those of their dated sets in effect that day (from inclusive, until
    exclusive; worked out here by comparing dates)."""
    dated_config = make(
        [{"name": f"t{i}", **own, "dated_rules": dated} for i, (own, dated) in enumerate(tenants)]
    )
    flat = []
    for i, (own, dated) in enumerate(tenants):
        on_day = [
            d
            for d in dated
            if (d["effective_from"] is None or d["effective_from"] <= day)
            and (d["effective_until"] is None or day < d["effective_until"])
        ]
        flat.append(
            {
                "name": f"t{i}",
                "cost_center": own["cost_center"],
                **{
                    kind: own[kind] + [r for d in on_day for r in d[kind]]
                    for kind in ("namespaces", "vclusters", "pod_labels")
                },
            }
        )
    assert resolve_tenant(dated_config, namespace, labels, day) == resolve_tenant(
        make(flat), namespace, labels, day
    )
