"""The sections around the metering: the warehouse's place and storage, stranded GPUs, data checks, dashboard
roles, and budget alerts."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gpumeter.config.base import _Model

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
