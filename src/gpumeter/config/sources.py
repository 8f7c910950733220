"""Where a cluster's samples come from: ParquetSource, PrometheusSource, and the Cluster that names one.

Each kind of source says here what only its settings decide: how a stored day names it (`describe`), its
paths made absolute (`with_paths`), a folder it needs that does not exist (`missing_path`) and the cluster
objects the snapshot job keeps for it (`snapshots_from`). How a kind is read is ingest's (ingest/sources.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from gpumeter.config.base import _FILE_NAME, MAX_NAME_CHARS, _file_name_part, _Model


class ParquetSource(_Model):
    """Raw samples already in the raw-samples schema (the simulator's output, or an earlier pull)."""

    kind: Literal["parquet"] = "parquet"
    path: str = Field(description="Directory holding raw_dcgm_samples/, raw_kube_samples/ and k8s/.")

    def describe(self) -> str:
        """The source as a message names it."""
        return f"the Parquet source {self.path}"

    def with_paths(self, resolve: Callable[[str | None], str | None]) -> Self:
        """The source with each of its paths passed through `resolve`."""
        return self.model_copy(update={"path": resolve(self.path)})

    def missing_path(self) -> tuple[str, str] | None:
        """(field, what to do) when the source's folder does not exist; None when it does."""
        if Path(self.path).is_dir():
            return None
        return (
            "path",
            f"the source folder {self.path} does not exist: correct the path, or write raw samples "
            f"there first (`gpumeter simulate --out {self.path}` writes simulated ones)",
        )

    def snapshots_from(self) -> tuple[str, str] | None:
        """(kubeconfig, folder) of the DRA snapshots kept for this source: none, the files hold their own."""
        return None


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

    def describe(self) -> str:
        """The source as a message names it."""
        return f"Prometheus at {self.url}"

    def with_paths(self, resolve: Callable[[str | None], str | None]) -> Self:
        """The source with each of its paths passed through `resolve`."""
        return self.model_copy(
            update={
                "claims_file": resolve(self.claims_file),
                "slices_file": resolve(self.slices_file),
                "kubeconfig": resolve(self.kubeconfig),
                "k8s_snapshots_dir": resolve(self.k8s_snapshots_dir),
            }
        )

    def missing_path(self) -> tuple[str, str] | None:
        """A server is not checked for existence here (`gpumeter source check` asks it)."""
        return None

    def snapshots_from(self) -> tuple[str, str] | None:
        """(kubeconfig, folder) of the DRA snapshots the snapshot job keeps for this source, when both are set."""
        if self.kubeconfig and self.k8s_snapshots_dir:
            return self.kubeconfig, self.k8s_snapshots_dir
        return None

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
