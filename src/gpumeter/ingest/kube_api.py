"""The Kubernetes API client of ingest: lists of resource.k8s.io objects (ResourceClaims, ResourceSlices)
through the official `kubernetes` client (an optional dependency), paged, from the first version the API
server serves. The Prometheus source lists with it where no file or kept snapshot gives a kind; the
snapshot job (gpumeter/pipelines/k8s_snapshots.py) keeps timed snapshots with it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from gpumeter.ingest.contract import SourceError, one_line


class KubeApi:
    """resource.k8s.io lists of one cluster, from `kubeconfig`. `snapshot` is a list with the time it shows."""

    VERSIONS = ("v1", "v1beta2", "v1beta1")

    def __init__(self, kubeconfig: str) -> None:
        try:
            from kubernetes import client, config  # optional: only a cluster listed through its API needs it
        except ImportError:
            raise SourceError(
                f"kubeconfig {kubeconfig} is set on a prometheus source, but the `kubernetes` package is not "
                "installed: pip install kubernetes (or give claims_file/slices_file instead)"
            ) from None
        self.kubeconfig = kubeconfig
        self.listed_at_ms: dict[str, int] = {}
        try:
            self.api = client.CustomObjectsApi(config.new_client_from_config(config_file=kubeconfig))
        except Exception as exc:  # the client raises ConfigException, OSError, yaml errors...
            raise SourceError(f"kubeconfig {kubeconfig}: cannot be loaded ({exc}); check the file") from None

    def snapshot(self, plural: str) -> tuple[int, dict[str, Any]]:
        """(taken_ms, the list): the time, epoch ms, at which the first page of the served version was asked
        for. The API server answers a list, all its `continue` pages included, at the one resourceVersion it
        reads when the first request arrives, so that is the moment the snapshot shows."""
        doc = self.list(plural)
        return self.listed_at_ms[plural], doc

    def list(self, plural: str) -> dict[str, Any]:
        """Every object of `plural` (e.g. paths.RESOURCE_CLAIMS), as one `List` document."""
        last: Exception | None = None
        for version in self.VERSIONS:
            items: list[Any] = []
            token: str | None = None
            asked_ms = time.time_ns() // 1_000_000
            try:
                while True:
                    kwargs: dict[str, Any] = {"limit": 500}
                    if token:
                        kwargs["_continue"] = token
                    page = self.api.list_cluster_custom_object("resource.k8s.io", version, plural, **kwargs)
                    items.extend(page.get("items") or [])
                    token = (page.get("metadata") or {}).get("continue")
                    if not token:
                        break
            except Exception as exc:
                if getattr(exc, "status", None) == 404:
                    last = exc
                    continue
                raise SourceError(
                    f"kubeconfig {self.kubeconfig}: listing {plural}.resource.k8s.io/{version} failed "
                    f"({_api_reason(exc)}); "
                    f"check access (`kubectl get {plural} -A`) and RBAC (list {plural} in resource.k8s.io)"
                ) from None
            self.listed_at_ms[plural] = asked_ms
            return {"apiVersion": "v1", "kind": "List", "items": items}
        raise SourceError(
            f"kubeconfig {self.kubeconfig}: the API server serves no resource.k8s.io {plural} "
            f"({', '.join(self.VERSIONS)}: {_api_reason(last) if last else 'not found'}); is DRA enabled on this "
            "cluster?"
        )


def _api_reason(exc: BaseException) -> str:
    """An API server failure in one line: `HTTP 403 Forbidden: <the Status message>` (the client's own
    text carries every response header), else the exception's text."""
    status = getattr(exc, "status", None)
    if not status:
        return one_line(exc)
    message = ""
    try:
        doc = json.loads(getattr(exc, "body", None) or "")
        message = doc.get("message", "") if isinstance(doc, dict) else ""
    except (ValueError, TypeError):
        pass
    reason = getattr(exc, "reason", "") or ""
    return f"HTTP {status} {reason}" + (f": {one_line(message)}" if message else "")


__all__ = ["KubeApi"]
