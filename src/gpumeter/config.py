"""Configuration: one YAML file, validated by pydantic. docs/config.md explains every field."""

from __future__ import annotations

import difflib
import fnmatch
import itertools
import os
import re
from collections.abc import Iterable, Sequence
from datetime import date
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

import iso4217
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

# Where a config comes from when none is named: $GPUMETER_CONFIG, else the demo's (`gpumeter demo` writes it),
# else the example shipped in the package.
CONFIG_ENV = "GPUMETER_CONFIG"
DEMO_DIR = Path(".gpumeter") / "demo"
EXAMPLE_CONFIG: Traversable = files("gpumeter.examples") / "demo-config.yaml"

RESERVED_BUCKETS = ("__idle__", "__unallocated__")
IDLE = "__idle__"
UNALLOCATED = "__unallocated__"


def tenant_slug(name: str) -> str:
    """How a tenant name reads on invoices (the readable part of its invoice id): capitals, every run of
    other characters one `-`. `team-a`, `team.a` and `TEAM_A` all read TEAM-A; `__idle__` reads IDLE."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").upper()


# A tenant whose name reads like a bucket's would be taken for it on an invoice (`idle` for __idle__).
_BUCKET_SLUGS = {tenant_slug(bucket): bucket for bucket in RESERVED_BUCKETS}

# R12 rounds to the currency's minor unit. The ISO 4217 list comes from the `iso4217` package, which ships
# the maintenance agency's own published table (a hand-written table goes stale and missed XOF, IQD, ...).
ISO_4217_PUBLISHED = iso4217.__published__


def iso_minor_unit(code: str) -> int | None:
    """ISO 4217 minor unit of `code`; None for a code without one (gold XAU, the test code XTS, ...).
    KeyError for a code that is not on the list."""
    try:
        return iso4217.Currency(code).exponent
    except ValueError:
        raise KeyError(code) from None


_LABEL_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

# Bounds of the values (docs/config.md, "What the config refuses"). Far above anything real in any currency,
# far below what would overflow the exact money arithmetic (R12) or a file system: a value past them is a typo.
MAX_PRICE = 1e9  # per GPU-hour, MIG instance-hour or kWh
MAX_BUDGET = 1e15  # a tenant's monthly budget
MAX_NAME_CHARS = 63  # a name that becomes part of file and folder names (Kubernetes' DNS label limit)
MAX_TEXT_CHARS = 128  # a free text shown on invoices (pool, cost center, GPU model)
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
REFUSES = 'docs/config.md, "What the config refuses"'


def _preview(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:24] + "…")


def _at_most(value: str, what: str, limit: int, because: str) -> None:
    """ValueError where `value` is longer than `limit` characters, saying why the limit is there."""
    if len(value) > limit:
        raise ValueError(
            f"{what} {_preview(value)} is {len(value):,} characters long; at most {limit} are accepted, "
            f"as {because}: shorten it"
        )


def _file_name_part(value: object, what: str) -> object:
    """A name that becomes part of file and folder names (invoice files, `cluster=<c>` partitions): at most
    MAX_NAME_CHARS of letters, digits, `.`, `_` and `-`, starting with a letter or digit."""
    if not isinstance(value, str):
        return value
    _at_most(value, what, MAX_NAME_CHARS, "it becomes part of file and folder names")
    if not _FILE_NAME.match(value):
        bad = sorted({c for c in value if c in "/\\" or not c.isprintable()})
        why = (
            f" ({', '.join(repr(c) for c in bad)} in a file name would be a folder or end the name)"
            if bad
            else ""
        )
        raise ValueError(
            f"{what} {_preview(value)} may hold only letters, digits, '.', '_' and '-', starting with a letter "
            f"or digit: it becomes part of file and folder names{why}"
        )
    return value


def _invoice_text(value: object, what: str) -> object:
    """A free text printed on invoices: at most MAX_TEXT_CHARS, no control characters (a newline or NUL)."""
    if not isinstance(value, str):
        return value
    _at_most(value, what, MAX_TEXT_CHARS, "it is printed on invoices")
    if any(not c.isprintable() for c in value):
        raise ValueError(
            f"{what} {_preview(value)} holds a control character (a newline, tab or NUL); it is printed on "
            "invoices as one line: remove it"
        )
    return value


Price = Annotated[float, Field(ge=0, le=MAX_PRICE)]
_MIG_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")


class ConfigError(ValueError):
    """A configuration problem. `problems` lists each one as (place, message)."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: {place}: {msg}" if place else f"{source}: {msg}" for place, msg in problems]
        super().__init__("\n".join(lines))


class _Model(BaseModel):
    # Every float field is finite: `.inf` and `.nan` are refused (docs/config.md, "What the config refuses").
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ParquetSource(_Model):
    """Raw samples already in the raw-samples schema (the simulator's output, or an earlier pull)."""

    kind: Literal["parquet"] = "parquet"
    path: str = Field(description="Directory holding raw_dcgm_samples/, raw_kube_samples/ and k8s/.")


class PrometheusSource(_Model):
    """Any PromQL API: Prometheus, Thanos, Mimir, VictoriaMetrics."""

    kind: Literal["prometheus"] = "prometheus"
    url: str
    bearer_token_env: str | None = Field(None, description="Name of an environment variable holding a token.")
    headers_env: str | None = Field(None, description="Environment variable holding extra headers as JSON.")
    verify_tls: bool = True
    timeout_seconds: float = Field(60.0, gt=0, le=3600)
    retries: int = Field(3, ge=0, le=20)
    max_concurrent_queries: int = Field(4, ge=1, le=64)
    encoding: Literal["gzip", "identity"] = Field(
        "gzip",
        description="How answers travel: gzip (about a tenth of the bytes, more CPU on the server) or identity.",
    )
    selector: str | None = Field(None, description='Added to every query, e.g. cluster="prod-a".')
    replica_labels: list[str] = Field(default_factory=lambda: ["prometheus_replica", "replica"])
    claims_file: str | None = Field(None, description="`kubectl get resourceclaims -A -o json` output.")
    slices_file: str | None = Field(None, description="`kubectl get resourceslices -A -o json` output.")
    kubeconfig: str | None = None
    k8s_snapshots_dir: str | None = Field(
        None,
        description="Folder of timed DRA snapshots (cluster=<c>/day=<d>/resourceclaims-<time>.json, ...), kept "
        "by the snapshot_k8s_objects job from `kubeconfig` and read for each day (claims vanish with their pods).",
    )
    chunk_seconds: int = Field(
        3600, ge=1, le=7 * 86_400, description="Length of one pull window (one query per metric and window)."
    )
    min_chunk_seconds: int = Field(
        60, ge=1, le=7 * 86_400, description="Smallest window when the server says too large."
    )
    dedupe_bucket_seconds: int = Field(
        3600,
        ge=1,
        le=86_400,
        description="The pull's part size (two parts at most are held in memory); divides a day.",
    )
    pushdown: bool = Field(True, description="Ask aggregates first where that stays exact (XID errors).")
    query_params: dict[str, str] = Field(
        default_factory=dict,
        description="More parameters sent with every query, e.g. Thanos' dedup: false (docs/prometheus.md).",
    )

    # Sent with every query, so that the backends that could answer with less than every raw sample (R1)
    # either answer with all of them or fail; a server ignores a parameter it does not know. Thanos: a store
    # that does not answer is an error, not a gap, and only raw blocks are read, never downsampled aggregates
    # (a querier may default instant queries to a coarser resolution). VictoriaMetrics cluster: a vmstorage
    # node that does not answer is an error. An answer that still says it may be incomplete is refused
    # (ingest/prometheus/answers.PartialAnswer).
    COMPLETE_RAW_ANSWERS: ClassVar[dict[str, str]] = {
        "partial_response": "false",
        "max_source_resolution": "0s",
        "deny_partial_response": "1",
    }
    # The query's own parameters (/api/v1/query); with the above, what `query_params` may not set.
    QUERY_PARAMETERS: ClassVar[tuple[str, ...]] = ("query", "time", "timeout")

    # One PromQL label matcher: name, operator, a quoted value whose only escapes are backslash pairs, so
    # the value can never close its quotes early (no PromQL injection through `selector`).
    _MATCHER: ClassVar[re.Pattern[str]] = re.compile(
        r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\\n]|\\.)*)"\s*(?:,|$)'
    )

    @field_validator("selector")
    @classmethod
    def _label_matchers(cls, value: str | None) -> str | None:
        """The selector as label matchers `name op "value"` (ops = != =~ !~), braces optional; re-rendered
        canonically so that nothing but matchers ever reaches a query."""
        if value is None or not value.strip():
            return None
        text = value.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        text = text.strip().rstrip(",")
        matchers, pos = [], 0
        while pos < len(text):
            found = cls._MATCHER.match(text, pos)
            if found is None or found.end() == pos:
                raise ValueError(
                    f"selector {value!r} is not a list of label matchers at {text[pos:][:30]!r}: write "
                    'name="value" pairs separated by commas (operators = != =~ !~), e.g. cluster="prod-a"'
                )
            name, op, quoted = found.group(1), found.group(2), found.group(3)
            if name == "__name__":
                raise ValueError(f"selector {value!r} may not match __name__: gpumeter chooses the metrics")
            matchers.append(f'{name}{op}"{quoted}"')
            pos = found.end()
        return ",".join(matchers) or None

    @field_validator("query_params", mode="before")
    @classmethod
    def _query_params(cls, value: object) -> object:
        """YAML's `dedup: false` is a bool: sent as the API spells it (`false`); numbers as written."""
        if not isinstance(value, dict):
            return value

        def text(item: object) -> object:
            if isinstance(item, bool):
                return "true" if item else "false"
            return str(item) if isinstance(item, int | float) else item

        return {k: text(v) for k, v in value.items()}

    @field_validator("query_params")
    @classmethod
    def _query_params_leave_ours(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name in cls.QUERY_PARAMETERS:
                raise ValueError(f"query_params may not set {name!r}: gpumeter sets it for each query")
            if name in cls.COMPLETE_RAW_ANSWERS:
                raise ValueError(
                    f"query_params may not set {name!r}: gpumeter sends {name}={cls.COMPLETE_RAW_ANSWERS[name]} "
                    "so that the server answers with every raw sample or fails (docs/prometheus.md)"
                )
        return value

    def query_parameters(self) -> dict[str, str]:
        """What every query sends besides `query` and `time`."""
        return {"timeout": f"{self.timeout_seconds:g}s", **self.query_params, **self.COMPLETE_RAW_ANSWERS}

    @model_validator(mode="after")
    def _windows(self) -> PrometheusSource:
        if self.min_chunk_seconds > self.chunk_seconds:
            raise ValueError(
                f"min_chunk_seconds ({self.min_chunk_seconds}) must not exceed chunk_seconds ({self.chunk_seconds})"
            )
        if 86_400 % self.dedupe_bucket_seconds:
            raise ValueError(
                f"dedupe_bucket_seconds ({self.dedupe_bucket_seconds}) must divide a day (86400), so that "
                "each day's choice among HA replicas is its own (days are metered independently)"
            )
        return self


Source = Annotated[ParquetSource | PrometheusSource, Field(discriminator="kind")]


class Cluster(_Model):
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=_FILE_NAME.pattern)
    source: Source
    cluster_label: str = Field("cluster", description="Series label naming the cluster (R: vocabulary).")
    scrape_interval_seconds: int | None = Field(
        None,
        gt=0,
        le=3600,
        description="Δ of this cluster's exporters, where it differs from the pool's scrape_interval_seconds "
        "(docs/rules.md).",
    )

    @field_validator("name", mode="before")
    @classmethod
    def _name_for_folders(cls, value: object) -> object:
        return _file_name_part(value, "cluster name")


def _mig_profile_key(profile: str) -> str:
    if not _MIG_PROFILE.match(profile):
        raise ValueError(f"MIG profile {profile!r} does not parse as <N>g.<M>gb")
    return profile


def _namespace_pattern(pattern: str) -> str:
    if not re.fullmatch(r"[a-z0-9*?\[\]!-]+", pattern):
        raise ValueError(
            f"{pattern!r} is not a namespace name or glob (lowercase letters, digits, '-', '*', '?')"
        )
    return pattern


def _in_date_order(changes: Sequence[PriceChange | EnergyPriceChange]) -> None:
    for earlier, later in itertools.pairwise(changes):
        if later.effective_from <= earlier.effective_from:
            raise ValueError(
                f"effective_from {later.effective_from} follows {earlier.effective_from}: list price changes "
                "in date order, one per day"
            )


MigProfilePrices = dict[Annotated[str, AfterValidator(_mig_profile_key)], Price]


class PriceChange(_Model):
    """A model's prices from one UTC day on (R8): a day is metered at the prices in effect that day, so a day
    metered again after a price change keeps its own day's prices (docs/config.md, "Price changes")."""

    effective_from: date = Field(description="The first UTC day metered at these prices.")
    price_per_gpu_hour: float = Field(
        ge=0, le=MAX_PRICE, description="The model's price per GPU-hour from that day on."
    )
    mig_profiles: MigProfilePrices = Field(
        default_factory=dict,
        description="Its explicit prices per MIG instance-hour from that day on (a profile not named: weight × "
        "the GPU's price); the earlier ones do not carry over.",
    )


class GpuModelPrice(_Model):
    model: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="Canonical model name, e.g. H100-80GB."
    )
    aliases: list[str] = Field(
        default_factory=list,
        description="modelName values (exact, or shell globs like 'NVIDIA H100*') that mean this model.",
    )
    price_per_gpu_hour: float | None = Field(None, ge=0, le=MAX_PRICE)
    mig_profiles: MigProfilePrices = Field(
        default_factory=dict,
        description="Explicit price per MIG instance-hour, by profile (else weight × the GPU's price).",
    )
    price_changes: list[PriceChange] = Field(
        default_factory=list,
        description="Later prices, each from a UTC day on, in date order; before the first, the prices above.",
    )

    @field_validator("model", mode="before")
    @classmethod
    def _model_text(cls, value: object) -> object:
        return _invoice_text(value, "model")

    @field_validator("price_changes")
    @classmethod
    def _in_date_order(cls, value: list[PriceChange]) -> list[PriceChange]:
        _in_date_order(value)
        return value

    def prices_on(self, day: date) -> tuple[float | None, dict[str, float]]:
        """The price per GPU-hour and the MIG profiles' prices in effect on a UTC day."""
        change = _in_effect(self.price_changes, day)
        if change is None:
            return self.price_per_gpu_hour, self.mig_profiles
        return change.price_per_gpu_hour, change.mig_profiles


class MigFamily(_Model):
    """Extends the built-in MIG catalog (R3): profiles as [compute slices of 7, memory slices of 8]."""

    family: str
    models: list[str] = Field(description="modelName globs of the GPUs in this family.")
    profiles: dict[str, tuple[int, int]]

    @field_validator("profiles")
    @classmethod
    def _slices(cls, value: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        for profile, (compute, memory) in value.items():
            if not 1 <= compute <= 7 or not 1 <= memory <= 8:
                raise ValueError(f"{profile!r}: compute slices must be 1..7 and memory slices 1..8")
        return value


class EnergyPriceChange(_Model):
    """The energy price from one UTC day on, as PriceChange is a GPU model's (R8, R10)."""

    effective_from: date = Field(description="The first UTC day metered at this energy price.")
    price_per_kwh: float | None = Field(
        ge=0,
        le=MAX_PRICE,
        description="The price of one kWh from that day on; null: no energy lines from that day on.",
    )


_Change = TypeVar("_Change", PriceChange, EnergyPriceChange)


def _in_effect(changes: Sequence[_Change], day: date) -> _Change | None:
    """The last of the (date-ordered) changes in effect on a UTC day; None before the first."""
    return next((c for c in reversed(changes) if c.effective_from <= day), None)


class RateCard(_Model):
    price_source: Literal["rate_card", "opencost"] = "rate_card"
    mig_weight: Literal["compute", "memory"] = "compute"
    models: list[GpuModelPrice] = Field(default_factory=list)
    mig_catalog: list[MigFamily] = Field(default_factory=list)
    energy_price_per_kwh: float | None = Field(
        None,
        ge=0,
        le=MAX_PRICE,
        description="Price of one kWh of GPU energy; set, invoices get `energy` lines (docs/tariffs.md).",
    )
    energy_price_changes: list[EnergyPriceChange] = Field(
        default_factory=list,
        description="Later energy prices, each from a UTC day on, in date order; before the first, "
        "energy_price_per_kwh.",
    )

    @field_validator("energy_price_changes")
    @classmethod
    def _energy_in_date_order(cls, value: list[EnergyPriceChange]) -> list[EnergyPriceChange]:
        _in_date_order(value)
        return value

    def energy_price_on(self, day: date) -> float | None:
        """The price of one kWh in effect on a UTC day."""
        change = _in_effect(self.energy_price_changes, day)
        return self.energy_price_per_kwh if change is None else change.price_per_kwh


class Hybrid(_Model):
    """tariff: hybrid: a holder pays `reserved_fraction` of its reserved charge plus the rest of its usage
    charge (docs/tariffs.md)."""

    reserved_fraction: float = Field(
        ge=0, le=1, description="Share of the reserved charge; the rest is usage."
    )

    @field_validator("reserved_fraction")
    @classmethod
    def _six_decimals(cls, value: float) -> float:
        # The fraction enters the SQL as an exact DECIMAL(10, 9) (R13 stays exact): no float residue.
        if round(value, 6) != value:
            raise ValueError(
                f"reserved_fraction {value} has more than 6 decimals; write e.g. 0.4 or 0.333333"
            )
        return value


class PodLabelRule(_Model):
    key: str = Field(description="Pod label key as in Kubernetes (team) or sanitized (label_team).")
    value: str = Field(description="Exact value, or a shell glob.")

    @property
    def metric_label(self) -> str:
        """kube-state-metrics' sanitized name of the key (R7): invalid characters become `_`, then camelCase
        becomes snake_case and everything is lowercased, as ksm does (`app.kubernetes.io/team` ->
        `label_app_kubernetes_io_team`, `teamName` -> `label_team_name`). A key already starting with
        `label_` is taken as sanitized."""
        if self.key.startswith("label_"):
            return self.key
        sanitized = re.sub(r"[^a-zA-Z0-9_]", "_", self.key)
        return "label_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", sanitized).lower()


NamespacePatterns = list[Annotated[str, AfterValidator(_namespace_pattern)]]


class DatedRules(_Model):
    """More rules of a tenant, in effect on the UTC days [effective_from, effective_until) only (R7): a namespace,
    vCluster or pod label handed from one team to another on a date (docs/config.md, "Tenant rules with dates")."""

    effective_from: date | None = Field(None, description="The first UTC day these rules apply to.")
    effective_until: date | None = Field(None, description="The first UTC day they no longer apply to.")
    namespaces: NamespacePatterns = Field(default_factory=list, description="Namespace names or shell globs.")
    vclusters: list[str] = Field(default_factory=list, description="vCluster names (host pod label).")
    pod_labels: list[PodLabelRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _a_period_and_a_rule(self) -> DatedRules:
        if self.effective_from is None and self.effective_until is None:
            raise ValueError(
                "give effective_from, effective_until or both (rules for every day go in the tenant's own "
                "namespaces, vclusters and pod_labels)"
            )
        if (
            self.effective_from is not None
            and self.effective_until is not None
            and self.effective_until <= self.effective_from
        ):
            raise ValueError(
                f"effective_until {self.effective_until} is not after effective_from {self.effective_from}: the "
                "rules would apply to no day"
            )
        if not (self.namespaces or self.vclusters or self.pod_labels):
            raise ValueError("names no namespace, vCluster or pod label rule")
        return self

    def in_effect(self, day: date) -> bool:
        return (self.effective_from is None or self.effective_from <= day) and (
            self.effective_until is None or day < self.effective_until
        )


class Tenant(_Model):
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=_FILE_NAME.pattern)
    cost_center: str | None = Field(None, max_length=MAX_TEXT_CHARS)
    namespaces: NamespacePatterns = Field(default_factory=list, description="Namespace names or shell globs.")
    vclusters: list[str] = Field(default_factory=list, description="vCluster names (host pod label).")
    pod_labels: list[PodLabelRule] = Field(default_factory=list)
    dated_rules: list[DatedRules] = Field(
        default_factory=list,
        description="More rules, each in effect from or until a UTC day (a namespace handed over on a date).",
    )
    monthly_budget: float | None = Field(None, ge=0, le=MAX_BUDGET)
    kueue_cluster_queues: list[str] = Field(
        default_factory=list,
        description="Kueue ClusterQueues whose quota is this tenant's (mart_queue_quota_usage).",
    )

    @field_validator("name", mode="before")
    @classmethod
    def _not_reserved(cls, value: object) -> object:
        # Before the name pattern, so that `__idle__` is told it is reserved, not that it is misspelt.
        if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
            return _file_name_part(value, "tenant name")
        if value in RESERVED_BUCKETS:
            raise ValueError(
                f"tenant name {value!r} is reserved for the bucket of that name (idle capacity or GPU time no "
                "tenant claims, invoiced to nobody)"
            )
        if isinstance(value, str) and tenant_slug(value) in _BUCKET_SLUGS:
            bucket = _BUCKET_SLUGS[tenant_slug(value)]
            what = "idle pool capacity" if bucket == IDLE else "GPU time no tenant claims"
            raise ValueError(
                f"tenant name {value!r} reads as the reserved bucket {bucket} ({what}, invoiced to nobody) "
                "on invoices; choose another name"
            )
        return _file_name_part(value, "tenant name")

    @field_validator("cost_center", mode="before")
    @classmethod
    def _cost_center_text(cls, value: object) -> object:
        return _invoice_text(value, "cost_center")


# URI schemes of a warehouse on an object store, and the fsspec driver package each one needs.
OBJECT_STORE_DRIVERS = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
}


class Warehouse(_Model):
    path: str = Field(
        ".gpumeter/warehouse",
        description="Where the Parquet warehouse is: a local directory, a file:// URI, or an object-store URI "
        "(s3://bucket/prefix; gs://, az:// with their fsspec driver installed). Credentials come from the "
        "environment or the pod's IAM role, never from this file (docs/deploy.md).",
    )
    endpoint_url: str | None = Field(
        None,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="S3-compatible endpoint (MinIO, Ceph, ...); default $AWS_ENDPOINT_URL_S3 or $AWS_ENDPOINT_URL, "
        "else AWS. Only for s3:// paths.",
    )
    region: str | None = Field(
        None, pattern=r"^[a-z0-9-]+$", description="S3 region; default $AWS_REGION. Only for s3:// paths."
    )
    persist_models: Literal["all", "marts"] = Field(
        "all",
        description="Store every model's day (all) or only the marts; staging/intermediate tables of a large "
        "fleet are 100 M rows a day and are then kept inside DuckDB only (docs/deploy.md).",
    )
    memory_limit: str = Field(
        "3GB",
        pattern=r"^\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)$",
        description="DuckDB memory_limit of one metering run; past it DuckDB spills to <path>/.tmp (for an "
        "object-store path, to gpumeter/.tmp under the system temp directory).",
    )

    @field_validator("path")
    @classmethod
    def _known_location(cls, value: str) -> str:
        if "://" not in value:
            return value
        scheme, _, rest = value.partition("://")
        scheme = scheme.lower()
        if scheme == "file":
            if not rest.startswith("/"):
                raise ValueError(f"{value!r}: a file:// URI takes an absolute path (file:///srv/warehouse)")
            return value
        if scheme not in OBJECT_STORE_DRIVERS:
            raise ValueError(
                f"{value!r}: unknown storage scheme {scheme}://; use a local directory, file:///path, or "
                f"one of {', '.join(s + '://bucket/prefix' for s in ('s3', 'gs', 'az'))}"
            )
        if not rest.strip("/"):
            raise ValueError(f"{value!r} names no bucket; use {scheme}://bucket/prefix")
        return value

    @model_validator(mode="after")
    def _s3_options_only_for_s3(self) -> Warehouse:
        scheme = self.path.partition("://")[0].lower() if "://" in self.path else ""
        if (self.endpoint_url or self.region) and scheme not in ("s3", "s3a"):
            raise ValueError("endpoint_url and region apply to an s3:// path only; remove them or use s3://")
        return self


class Stranded(_Model):
    """When free GPUs on a node count as `unschedulable` for lack of CPU or memory (R11)."""

    min_free_cpu_cores: float = Field(1.0, ge=0, le=100_000)
    min_free_memory_gib: float = Field(4.0, ge=0, le=1_000_000)


class Checks(_Model):
    min_coverage: float = Field(
        0.95, ge=0, le=1, description="Observed/expected GPU-seconds below this warns."
    )


class DashboardRole(_Model):
    """Who gets which dashboard role: an identity matching any of `emails` or `groups` (first rule wins)."""

    role: Literal["finance", "ops", "tenant"]
    tenant: str | None = Field(None, description="The tenant a `tenant` role sees; only for role: tenant.")
    emails: list[str] = Field(
        default_factory=list, description="Email addresses or shell globs (*@finance.example.com), any case."
    )
    groups: list[str] = Field(default_factory=list, description="Values of the group claim, exact.")

    @model_validator(mode="after")
    def _tenant_only_for_tenant_role(self) -> DashboardRole:
        if self.role == "tenant" and not self.tenant:
            raise ValueError("role: tenant needs `tenant:` naming the tenant it may see")
        if self.role != "tenant" and self.tenant:
            raise ValueError(f"role: {self.role} sees every tenant; remove `tenant:` or use role: tenant")
        if not self.emails and not self.groups:
            raise ValueError("a role mapping needs at least one of `emails` or `groups`")
        return self


class Dashboard(_Model):
    """Who sees what in the Streamlit dashboard when OIDC login is configured (docs/dashboard.md)."""

    email_claim: str = Field("email", description="ID-token claim holding the user's email.")
    group_claim: str = Field("groups", description="ID-token claim holding the user's groups (a list).")
    roles: list[DashboardRole] = Field(default_factory=list)


# An environment variable's name: what a shell (and Kubernetes' env) accepts.
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Alerts(_Model):
    """Budget alerts (docs/tariffs.md, "Budget alerts"): one message to a webhook when a tenant's spend, or its
    forecast, for a month first reaches a share of its monthly budget."""

    webhook_url_env: str = Field(
        "GPUMETER_ALERT_WEBHOOK",
        description="Name of the environment variable holding the webhook URL (the URL is a secret).",
    )
    format: Literal["slack", "generic"] = Field(
        "slack", description="Slack-compatible JSON (text and blocks) or a plain JSON object of the figures."
    )
    thresholds: list[float] = Field(
        default_factory=lambda: [0.8, 1.0],
        min_length=1,
        description="Shares of the monthly budget that alert when reached (0.8 = 80 %), increasing.",
    )
    basis: list[Literal["spend", "forecast"]] = Field(
        default_factory=lambda: ["spend", "forecast"],
        min_length=1,
        description="What is compared with the thresholds: the month's spend so far, its forecast, or both.",
    )
    timeout_seconds: float = Field(10.0, gt=0, le=300, description="Timeout of one delivery attempt.")
    retries: int = Field(3, ge=0, le=10, description="Retries of a failed delivery, with back-off.")

    @model_validator(mode="before")
    @classmethod
    def _no_on_key(cls, data: Any) -> Any:
        # YAML 1.1 reads a bare `on:` key as the boolean true: say what to write instead of "extra input".
        if isinstance(data, dict) and any(key is True or key == "on" for key in data):
            raise ValueError(
                "`on:` is read by YAML as the word true, not as a field: write `basis: [spend, forecast]` "
                "for what the thresholds are compared with"
            )
        return data

    @field_validator("webhook_url_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if "://" in value:
            raise ValueError(
                "webhook_url_env is the name of an environment variable holding the webhook URL, not the URL "
                "itself: a webhook URL is a secret and never goes in this file (e.g. GPUMETER_ALERT_WEBHOOK)"
            )
        if not _ENV_NAME.match(value):
            raise ValueError(
                f"{value!r} is not an environment variable name: letters, digits and `_`, not starting with a "
                "digit (e.g. GPUMETER_ALERT_WEBHOOK)"
            )
        return value

    @field_validator("thresholds")
    @classmethod
    def _shares(cls, value: list[float]) -> list[float]:
        for share in value:
            if not 0 < share <= 10:
                raise ValueError(
                    f"threshold {share} is not a share of the budget above 0 and at most 10 "
                    "(0.8 is 80 %, 1.0 the whole budget, 1.5 half as much again)"
                )
        if value != sorted(set(value)):
            raise ValueError(
                f"thresholds {value} must be increasing without repeats, e.g. [0.8, 1.0]: each one alerts once"
            )
        return value

    @field_validator("basis")
    @classmethod
    def _unique_basis(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"basis {value} names one twice: list spend, forecast or both, once each")
        return value


class Config(_Model):
    pool: str = Field("gpu-pool", max_length=MAX_TEXT_CHARS, description="Name of the pool on invoices.")
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$")
    currency_minor_unit: int | None = Field(None, ge=0, le=4, validate_default=True)
    payment_terms_days: int = Field(
        30, ge=0, le=365, description="Days from an invoice's issue (its period's close) to its due date."
    )
    scrape_interval_seconds: int = Field(
        30, gt=0, le=3600, description="Δ: the time one raw sample stands for, in seconds (docs/rules.md)."
    )
    kube_lookback_seconds: int = Field(
        300,
        gt=0,
        le=86_400,
        description="How long a kube-state-metrics sample describes DCGM samples when its exporter is no longer "
        "scraped (else until the exporter's next scrape), and how long an OpenCost price holds.",
    )
    clusters: list[Cluster] = Field(min_length=1)
    rate_card: RateCard = Field(default_factory=RateCard)
    tenants: list[Tenant] = Field(default_factory=list)
    share: Literal["equal", "requested"] = Field(
        "equal",
        description="How a shared device is split among its holders: equally, or by their declared fractions "
        "(HAMi gpucores, KAI gpu-fraction).",
    )
    idle_policy: Literal["platform", "proportional"] = "platform"
    focus_version: Literal["1.2", "1.3"] = Field(
        "1.2", description="The FOCUS version of the FOCUS export: 1.2, or 1.3 with split cost allocation."
    )
    tariff: Literal["reserved", "used", "hybrid"] = Field(
        "reserved", description="Pay held GPU-time, busy GPU-time, or a mix (docs/tariffs.md)."
    )
    hybrid: Hybrid | None = Field(None, description="The mix of tariff: hybrid.")
    idle_threshold: float = Field(0.05, ge=0, le=1)
    warehouse: Warehouse = Field(default_factory=Warehouse)
    stranded: Stranded = Field(default_factory=Stranded)
    checks: Checks = Field(default_factory=Checks)
    dashboard: Dashboard = Field(default_factory=Dashboard)
    alerts: Alerts | None = Field(
        None, description="Budget alerts to a webhook (docs/tariffs.md); unset, none are sent."
    )

    @field_validator("pool", mode="before")
    @classmethod
    def _pool_text(cls, value: object) -> object:
        return _invoice_text(value, "pool")

    @field_validator("focus_version", mode="before")
    @classmethod
    def _focus_version_text(cls, value: object) -> object:
        return str(value) if isinstance(value, float) else value  # YAML reads an unquoted 1.3 as a number

    @field_validator("currency")
    @classmethod
    def _iso_4217_code(cls, value: str) -> str:
        try:
            iso_minor_unit(value)
        except KeyError:
            raise ValueError(
                f"{value!r} is not an ISO 4217 currency code (list of {ISO_4217_PUBLISHED}); "
                "write the three-letter code, e.g. USD, EUR, JPY"
            ) from None
        return value

    @field_validator("currency_minor_unit")
    @classmethod
    def _minor_unit_known(cls, value: int | None, info: ValidationInfo) -> int | None:
        # Money is rounded once per invoice line to this many decimals (R12): it must be known.
        currency = info.data.get("currency")  # absent when the currency itself is invalid
        if value is None and currency is not None and iso_minor_unit(currency) is None:
            raise ValueError(
                f"currency {currency} has no ISO 4217 minor unit; set currency_minor_unit "
                "to the decimals amounts are rounded to (0..4)"
            )
        return value

    @model_validator(mode="after")
    def _dashboard_tenants_exist(self) -> Config:
        known = {t.name for t in self.tenants}
        for role in self.dashboard.roles:
            if role.tenant is not None and role.tenant not in known:
                raise ValueError(f"dashboard role for tenant {role.tenant!r}: no tenant of that name")
        return self

    @model_validator(mode="after")
    def _price_changes_with_the_rate_card(self) -> Config:
        if self.rate_card.price_source == "opencost":
            for m, model in enumerate(self.rate_card.models):
                if model.price_changes:
                    raise ValueError(
                        f"rate_card.models[{m}] ({model.model}) has price_changes, but price_source is "
                        "opencost, which prices each sample from OpenCost: remove them or set price_source: "
                        "rate_card"
                    )
        return self

    @model_validator(mode="after")
    def _hybrid_with_its_tariff(self) -> Config:
        if self.tariff == "hybrid" and self.hybrid is None:
            raise ValueError("tariff: hybrid needs `hybrid: {reserved_fraction: F}` (0..1; docs/tariffs.md)")
        if self.tariff != "hybrid" and self.hybrid is not None:
            raise ValueError(
                f"`hybrid` is set but tariff is {self.tariff!r}: set tariff: hybrid or remove `hybrid`"
            )
        return self

    @model_validator(mode="after")
    def _kueue_queues_once(self) -> Config:
        owners: dict[str, str] = {}
        for tenant in self.tenants:
            for queue in tenant.kueue_cluster_queues:
                if queue in owners and owners[queue] != tenant.name:
                    raise ValueError(
                        f"Kueue ClusterQueue {queue!r} is listed by tenants {owners[queue]!r} and {tenant.name!r}; "
                        "a queue's quota belongs to one tenant"
                    )
                owners[queue] = tenant.name
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> Config:
        seen: set[str] = set()
        slugs: dict[str, str] = {}
        for tenant in self.tenants:
            if tenant.name in RESERVED_BUCKETS:
                raise ValueError(f"tenant name {tenant.name!r} is reserved")
            if tenant.name in seen:
                raise ValueError(f"tenant {tenant.name!r} is defined twice")
            seen.add(tenant.name)
            other = slugs.setdefault(tenant_slug(tenant.name), tenant.name)
            if other != tenant.name:
                raise ValueError(_slug_clash(tenant.name, other))
        clusters = [c.name for c in self.clusters]
        if len(set(clusters)) != len(clusters):
            raise ValueError("cluster names must be unique")
        return self

    @property
    def minor_unit(self) -> int:
        """Decimals money is rounded to (R12): the override, else the currency's ISO 4217 minor unit."""
        if self.currency_minor_unit is not None:
            return self.currency_minor_unit
        unit = iso_minor_unit(self.currency)
        assert unit is not None  # a currency without one needs the override (validated)
        return unit

    def cluster(self, name: str) -> Cluster:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(name)

    def scrape_interval_of(self, cluster: str) -> int:
        """Δ of a cluster's samples (R1): its own `scrape_interval_seconds`, else the pool's. A cluster the
        config no longer names (its stored days are still read) has the pool's."""
        own = next((c.scrape_interval_seconds for c in self.clusters if c.name == cluster), None)
        return own if own is not None else self.scrape_interval_seconds


def select_clusters(config: Config, clusters: Iterable[str] | None) -> list[str]:
    """The named clusters of the config (default: all of them), in config order; an unknown name is an error."""
    known = [c.name for c in config.clusters]
    if clusters is None:
        return known
    wanted = list(dict.fromkeys(clusters))
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise ConfigError(
            "clusters", [("", f"{', '.join(unknown)} not in the config (its clusters: {', '.join(known)})")]
        )
    return [c for c in known if c in wanted]


# --- loading ---------------------------------------------------------------------------------


# Bounds whose pydantic message ("less than or equal to 1000000000") is told with what it means.
_AMOUNT_BOUNDS = {
    MAX_PRICE: "a price (per GPU-hour, MIG instance-hour or kWh)",
    MAX_BUDGET: "a monthly budget",
}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The field names of the section an unknown key `loc` was found in (loc's last part is the key)."""
    models: list[type[BaseModel]] = [Config]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        inner = [
            m
            for model in models
            if (f := model.model_fields.get(str(part)))
            for m in _models_in(f.annotation)
        ]
        if inner:
            models = inner
            continue
        # The tag pydantic puts in the place of a union's member (`parquet`), or a key of a mapping.
        tagged = [m for m in models if "kind" in m.model_fields and m.model_fields["kind"].default == part]
        models = tagged or models
    return sorted({name for model in models for name in model.model_fields})


def _message(err: ErrorDetails) -> str:
    """A pydantic error's message, saying what to do where pydantic's does not."""
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    shown = _preview(given) if isinstance(given, str) else repr(given)
    if kind == "extra_forbidden" and err["loc"]:
        close = difflib.get_close_matches(str(err["loc"][-1]), _fields_at(err["loc"]), n=1)
        if close:  # a typo of a field of the same section
            return f"{err['msg']}: not a field here; did you mean `{close[0]}`?"
        return f"{err['msg']}: not a field here (docs/config.md lists every field)"
    if kind == "finite_number":
        return (
            f"{shown} is not a finite number: write the number itself (.inf and .nan are refused; {REFUSES})"
        )
    if kind == "less_than_equal" and ctx.get("le") in _AMOUNT_BOUNDS:
        return (
            f"{shown} is more than {ctx['le']:,.0f}, the most {_AMOUNT_BOUNDS[ctx['le']]} may be in any "
            f"currency: a typo? write the amount in `currency` ({REFUSES})"
        )
    return err["msg"]


def _place(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("parquet", "prometheus") and out.endswith("source"):
            continue  # the discriminated-union tag pydantic inserts
        elif part == "[key]":
            continue  # a bad dict key: the key itself is the place
        else:
            out += ("." if out else "") + str(part)
    return out


# Bounds of the text itself: checked while the YAML is composed, before any Python object is built, so that a
# hostile or mistyped file is refused at once instead of running away with memory.
MAX_CONFIG_CHARS = 4 * 1024 * 1024  # a config of thousands of tenants is a few hundred kB
MAX_DEPTH = 20  # the deepest field of the models is 7 levels down
MAX_SCALAR_CHARS = 4096  # any one value or key (a path: PATH_MAX)


class _Refused(Exception):
    """A problem of the YAML text found while reading it: its place, 1-based line and message."""

    def __init__(self, place: str, line: int, message: str):
        super().__init__(message)
        self.place, self.line, self.message = place, line, message


class _TextProblems(Exception):
    """Problems of the YAML text, as ConfigError's (place, message) without the source."""

    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__(problems)
        self.problems = problems


def _label(place: str, line: int) -> str:
    if not line:
        return place
    return f"{place} (line {line})" if place else f"line {line}"


class _BadValue(Exception):
    """A scalar YAML cannot make a value of (a date of year 0): the node, and why."""

    def __init__(self, node: yaml.Node, reason: str):
        super().__init__(reason)
        self.node, self.reason = node, reason


class _ConfigLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses aliases and nesting past MAX_DEPTH while composing: a billion-laughs
    document (nine levels of nine aliases) is refused at its first alias, before anything is expanded."""

    def __init__(self, text: str):
        super().__init__(text)
        self._places: list[str] = []

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:  # type: ignore[override]
        above = self._places[-1] if self._places else ""
        if parent is None or index is None:  # the document, or a key: the key is placed at its mapping
            place = above
        elif isinstance(index, int):
            place = f"{above}[{index}]"
        else:
            key = getattr(index, "value", index)
            place = f"{above}.{key}" if above else str(key)
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(
                place,
                event.start_mark.line + 1,
                f"YAML alias *{event.anchor}: the config refuses aliases (a few lines of them can expand to "
                f"gigabytes); write the value out in full where it is used, and remove the anchor &{event.anchor}",
            )
        if len(self._places) >= MAX_DEPTH:
            event = self.peek_event()
            raise _Refused(
                place,
                event.start_mark.line + 1,
                f"nested more than {MAX_DEPTH} levels deep, which no field of the config is: a YAML mistake? ({REFUSES})",
            )
        self._places.append(place)
        try:
            return super().compose_node(parent, index)  # type: ignore[no-any-return, arg-type]
        finally:
            self._places.pop()

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:  # YAML errors pass; _BadValue is neither
            raise _BadValue(node, str(exc)) from None


def _key_of(loader: _ConfigLoader, key: yaml.Node) -> object:
    """What a mapping key is once read: `on` and `true` are one key (YAML 1.1's true), `1` and `01` another."""
    if isinstance(key, yaml.ScalarNode):
        try:
            value = loader.construct_object(key, deep=True)
            hash(value)
            return (type(value).__name__, value)
        except (_BadValue, yaml.YAMLError, TypeError):
            loader.recursive_objects.pop(key, None)  # left behind by a failed construction: built again below
        return (key.tag, key.value)
    return (key.tag, id(key))  # a complex key: never a repeat of another


def _read_yaml(text: str) -> tuple[Any, dict[str, int]]:
    """The YAML text as Python data, and the line of each place in it (`tenants[2].namespaces[0]` -> 9).
    yaml.YAMLError for text that is not YAML; _TextProblems for what the config refuses of YAML itself:
    aliases, nesting past MAX_DEPTH, values over MAX_SCALAR_CHARS, merge keys, a key given twice in one
    mapping, and scalars YAML cannot read (a date of year 0)."""
    if len(text) > MAX_CONFIG_CHARS:
        raise _TextProblems([("", _too_long_text())])
    try:
        return _compose_and_read(text)
    except _Refused as refused:
        raise _TextProblems([(_label(refused.place, refused.line), refused.message)]) from None


def _too_long_text() -> str:
    return f"is longer than {MAX_CONFIG_CHARS:,} characters, the most a config may be ({REFUSES})"


def _compose_and_read(text: str) -> tuple[Any, dict[str, int]]:
    loader = _ConfigLoader(text)
    try:
        root = loader.get_single_node()
        lines: dict[str, int] = {}
        places: dict[int, str] = {}
        problems: list[_Refused] = []

        def walk(node: yaml.Node, place: str) -> None:
            lines.setdefault(place, node.start_mark.line + 1)
            places[id(node)] = place
            if isinstance(node, yaml.ScalarNode):
                if len(node.value) > MAX_SCALAR_CHARS:
                    problems.append(
                        _Refused(
                            place,
                            node.start_mark.line + 1,
                            f"a value of {len(node.value):,} characters: the config refuses any value over "
                            f"{MAX_SCALAR_CHARS:,} (a name at most {MAX_NAME_CHARS}, a text on invoices at most "
                            f"{MAX_TEXT_CHARS}; {REFUSES})",
                        )
                    )
            elif isinstance(node, yaml.MappingNode):
                seen: dict[object, yaml.Node] = {}
                for key, value in node.value:
                    child = f"{place}.{key.value}" if place else str(key.value)
                    if isinstance(key, yaml.ScalarNode) and len(key.value) > MAX_SCALAR_CHARS:
                        child = place  # a key that long is no field: place it at its mapping
                    line = key.start_mark.line + 1
                    lines[child] = line
                    if key.tag == "tag:yaml.org,2002:merge":
                        problems.append(
                            _Refused(
                                child,
                                line,
                                "a YAML merge key `<<`: the config refuses merges (a merged field and one "
                                "written out would be one field set twice); write the fields out",
                            )
                        )
                    which = _key_of(loader, key)
                    if which in seen:
                        first = seen[which].start_mark.line + 1
                        problems.append(
                            _Refused(
                                child,
                                line,
                                f"{key.value!r} is given twice in one mapping, at line {first} and again at "
                                f"line {line}; YAML would silently keep the last one: keep one",
                            )
                        )
                    else:
                        seen[which] = key
                    walk(value, child)
            elif isinstance(node, yaml.SequenceNode):
                for index, item in enumerate(node.value):
                    walk(item, f"{place}[{index}]")

        if root is None:
            return None, lines
        walk(root, "")
        if problems:
            raise _TextProblems([(_label(p.place, p.line), p.message) for p in problems])
        try:
            return loader.construct_document(root), lines
        except _BadValue as bad:
            place = places.get(id(bad.node), "")
            line = bad.node.start_mark.line + 1
            what = getattr(bad.node, "value", "")
            shown = repr(what) if isinstance(what, str) and len(what) <= 40 else "the value"
            raise _Refused(place, line, f"{shown} is not a value YAML can read: {bad.reason}") from None
    finally:
        loader.dispose()


def _slug_clash(name: str, other: str, where: str = "") -> str:
    return (
        f"tenant {name!r} reads as {tenant_slug(name)} on invoices, like tenant {other!r}{where}: names that "
        "differ only in case or punctuation would be taken for one another (and their invoice files are "
        "one file on a case-insensitive disk); rename one"
    )


def _name_problems(raw: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    """Duplicate tenant and cluster names, and tenant names that read alike on invoices (R14), with the place
    of each repeat. Found on the raw data so that they are reported together with every other problem
    (pydantic runs Config's own check only on valid fields)."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    for section, what in (("tenants", "tenant"), ("clusters", "cluster")):
        items = raw.get(section)
        if not isinstance(items, list):
            continue
        first: dict[str, int] = {}
        by_slug: dict[str, int] = {}
        for index, item in enumerate(items):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            if name in first:
                problems.append(
                    (
                        (section, index, "name"),
                        f"{what} {name!r} is defined twice (first at {section}[{first[name]}])",
                    )
                )
                continue
            first[name] = index
            slug = tenant_slug(name)
            if section != "tenants" or not slug or slug in _BUCKET_SLUGS:
                continue  # a bucket's look-alike is the name's own problem (Tenant._not_reserved)
            if slug in by_slug:
                j = by_slug[slug]
                other = items[j]["name"]
                problems.append(((section, index, "name"), _slug_clash(name, other, f" ({section}[{j}])")))
            else:
                by_slug[slug] = index
    return problems


def parse_config(text: str, source: str = "<config>", base_dir: Path | None = None) -> Config:
    """Parse and validate; every problem is reported with its place (and line) in the file."""
    try:
        raw, lines = _read_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(source, [(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    except _TextProblems as refused:
        raise ConfigError(source, refused.problems) from None
    if not isinstance(raw, dict):
        raise ConfigError(
            source, [("", "the file must be a YAML mapping (`gpumeter config example` prints one)")]
        )
    names = _name_problems(raw)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        found = [(err["loc"], _message(err)) for err in exc.errors()]
        if names:  # Config's own name check (no place) repeats what _name_problems found, with places
            found = [(loc, msg) for loc, msg in found if loc]
        raise ConfigError(source, _placed(lines, [*found, *names])) from None
    if base_dir is not None:
        config = _resolve_paths(config, base_dir)
    return config


def _placed(lines: dict[str, int], found: list[tuple[tuple[Any, ...], str]]) -> list[tuple[str, str]]:
    """(loc, message) -> ("place (line N)", message), in the order of the file."""
    placed: list[tuple[int, str, str]] = []
    for loc, msg in found:
        place = _place(loc)
        line = lines.get(place)
        if line is None:  # a missing field: point at its parent
            parent = re.sub(r"(\.[^.\[\]]+|\[\d+\])$", "", place)
            line = lines.get(parent if parent != place else "")
        label = f"{place} (line {line})" if line else place
        placed.append((line or 0, label, msg.removeprefix("Value error, ")))
    placed.sort(key=lambda item: item[0])  # stable: problems of one line keep pydantic's order
    return [(label, msg) for _, label, msg in placed]


def _resolve_paths(config: Config, base_dir: Path) -> Config:
    """Relative paths in the file are relative to the file, so a config works from any directory."""

    def resolve(path: str | None) -> str | None:
        if path is None or "://" in path:
            return path
        expanded = os.path.expanduser(path)
        if os.path.isabs(expanded):
            return expanded
        return str((base_dir / expanded).resolve())

    clusters = []
    for cluster in config.clusters:
        source = cluster.source
        if isinstance(source, ParquetSource):
            source = source.model_copy(update={"path": resolve(source.path)})
        else:
            source = source.model_copy(
                update={
                    "claims_file": resolve(source.claims_file),
                    "slices_file": resolve(source.slices_file),
                    "kubeconfig": resolve(source.kubeconfig),
                    "k8s_snapshots_dir": resolve(source.k8s_snapshots_dir),
                }
            )
        clusters.append(cluster.model_copy(update={"source": source}))
    warehouse = config.warehouse.model_copy(update={"path": resolve(config.warehouse.path)})
    return config.model_copy(update={"clusters": clusters, "warehouse": warehouse})


def default_config_path() -> Path:
    """The config to use when none is named: $GPUMETER_CONFIG, else the demo's if `gpumeter demo` ran here,
    else the example shipped in the package (its relative paths are then relative to the package)."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    demo = DEMO_DIR / "config.yaml"
    if demo.exists():
        return demo.resolve()
    return Path(str(EXAMPLE_CONFIG))


def load_config(path: str | os.PathLike[str]) -> Config:
    file = Path(path)
    try:
        with file.open(encoding="utf-8") as handle:  # no more than parse_config takes, however large the file
            text = handle.read(MAX_CONFIG_CHARS + 1)
    except FileNotFoundError:
        raise ConfigError(
            str(file), [("", "file not found; `gpumeter demo` writes an example config")]
        ) from None
    except IsADirectoryError:
        raise ConfigError(str(file), [("", "is a directory, not a config file")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(file), [("", f"not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    except OSError as exc:
        raise ConfigError(str(file), [("", f"cannot be read: {exc.strerror or exc}")]) from None
    return parse_config(text, source=str(file), base_dir=file.resolve().parent)


def config_warnings(config: Config) -> list[tuple[str, str]]:
    """Problems that do not stop a run but that finance should know of (R7 overlaps, R8 premiums)."""
    warnings: list[tuple[str, str]] = []
    # R7: within one rule kind the first tenant in file order wins; an overlap is a warning, where the two rules
    # are in effect on a common day.
    rule_sets = [list(_tenant_rule_sets(i, tenant)) for i, tenant in enumerate(config.tenants)]
    for i, first in enumerate(config.tenants):
        for j in range(i + 1, len(config.tenants)):
            for place_a, period_a, rules_a in rule_sets[i]:
                for place_b, period_b, rules_b in rule_sets[j]:
                    if _periods_meet(period_a, period_b):
                        warnings.extend(_rule_overlaps(first.name, place_a, rules_a, place_b, rules_b))
    for m, model in enumerate(config.rate_card.models):
        if model.price_per_gpu_hour is None and config.rate_card.price_source == "rate_card":
            said = "no price: GPUs of this model stop the run"
            if model.price_changes:
                first = model.price_changes[0].effective_from
                said = f"no price before {first}: GPUs of this model stop days before it"
            warnings.append((f"rate_card.models[{m}].price_per_gpu_hour", said))
    return warnings


_Period = tuple[date | None, date | None]


def _tenant_rule_sets(index: int, tenant: Tenant) -> Iterable[tuple[str, _Period, Tenant | DatedRules]]:
    """A tenant's rules for every day, then each of its dated rule sets, with its place and its days."""
    yield f"tenants[{index}]", (None, None), tenant
    for k, rules in enumerate(tenant.dated_rules):
        yield f"tenants[{index}].dated_rules[{k}]", (rules.effective_from, rules.effective_until), rules


def _periods_meet(a: _Period, b: _Period) -> bool:
    starts = [d for d in (a[0], b[0]) if d is not None]
    ends = [d for d in (a[1], b[1]) if d is not None]
    return not starts or not ends or max(starts) < min(ends)


def _rule_overlaps(
    winner: str, place_a: str, a: Tenant | DatedRules, place_b: str, b: Tenant | DatedRules
) -> Iterable[tuple[str, str]]:
    """Warnings for the rules of `b` (a later tenant's) that `a` (tenant `winner`'s) can take a holder from."""
    for x, pa_ in enumerate(a.namespaces):
        for y, pb in enumerate(b.namespaces):
            if _globs_overlap(pa_, pb):
                yield (
                    f"{place_b}.namespaces[{y}]",
                    f"{pb!r} overlaps {pa_!r} of tenant {winner!r} ({place_a}.namespaces[{x}]), "
                    "which wins for the namespaces both match",
                )
    for y, vc in enumerate(b.vclusters):
        if vc in a.vclusters:
            yield (f"{place_b}.vclusters[{y}]", f"vCluster {vc!r} is also tenant {winner!r}'s, which wins")
    for y, rule in enumerate(b.pod_labels):
        for other in a.pod_labels:
            if rule.metric_label == other.metric_label and _globs_overlap(rule.value, other.value):
                yield (
                    f"{place_b}.pod_labels[{y}]",
                    f"{rule.key}={rule.value} overlaps {other.key}={other.value} of tenant {winner!r}, which wins",
                )


def _globs_overlap(a: str, b: str) -> bool:
    """Whether two shell globs can match one name: exact for literals, conservative for two globs."""
    a_glob, b_glob = any(c in a for c in "*?["), any(c in b for c in "*?[")
    if not a_glob and not b_glob:
        return a == b
    if not a_glob:
        return fnmatch.fnmatchcase(a, b)
    if not b_glob:
        return fnmatch.fnmatchcase(b, a)
    # Both globs: compare their literal prefixes; overlapping prefixes can match a common name.
    pa_, pb = re.split(r"[*?\[]", a, maxsplit=1)[0], re.split(r"[*?\[]", b, maxsplit=1)[0]
    return pa_.startswith(pb) or pb.startswith(pa_)


def config_schema() -> dict[str, Any]:
    return Config.model_json_schema()
