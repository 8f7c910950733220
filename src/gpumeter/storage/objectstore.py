"""A warehouse on an object store (s3://, gs://, az://) through fsspec: its options, the check that it can be
reached, and how DuckDB reads it in place."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import duckdb
from upath import UPath

from gpumeter.config import OBJECT_STORE_DRIVERS
from gpumeter.storage.files import _STORE_HELP, WarehouseError


def is_object_store_uri(location: str) -> bool:
    return urlparse(location).scheme.lower() in OBJECT_STORE_DRIVERS


def local_path_of(location: str) -> str:
    """A local path or `file://` URI as a path (`file:///srv/wh` -> `/srv/wh`)."""
    parsed = urlparse(location)
    if parsed.scheme.lower() != "file":
        return location
    if parsed.netloc not in ("", "localhost"):
        raise WarehouseError(
            f"warehouse {location}: a file:// URI names a local path (file:///srv/warehouse), not host "
            f"{parsed.netloc!r}; use an object-store URI (s3://bucket/prefix) for remote storage"
        )
    return unquote(parsed.path)


def store_options(
    location: str, endpoint_url: str | None = None, region: str | None = None
) -> dict[str, Any]:
    """fsspec options of an object store: only endpoint and region come from the config; credentials come
    from the driver's usual chain (environment, IAM role), never from the config file."""
    if urlparse(location).scheme.lower() not in ("s3", "s3a"):
        return {}
    client: dict[str, Any] = {}
    if region:
        client["region_name"] = region
    options: dict[str, Any] = {
        # Fail in seconds, not minutes, when the endpoint is down; botocore still retries throttling.
        "config_kwargs": {"connect_timeout": 10, "retries": {"max_attempts": 3, "mode": "standard"}},
    }
    if client:
        options["client_kwargs"] = client
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    return options


def _object_store_root(location: str, endpoint_url: str | None, region: str | None) -> UPath:
    try:
        root = UPath(location, **store_options(location, endpoint_url, region))
    except (ImportError, ValueError) as exc:
        driver = OBJECT_STORE_DRIVERS[urlparse(location).scheme.lower()]
        raise WarehouseError(
            f"warehouse {location}: {exc}. Install the fsspec driver {driver} (pip install {driver}) "
            "or set warehouse.path to a local directory"
        ) from None
    if not root.path.strip("/"):
        raise WarehouseError(f"warehouse {location}: the URI names no bucket; use s3://bucket/prefix")
    _check_reachable(root)
    return root


_REACHED: set[str] = set()  # object-store roots already checked by this process


def _check_reachable(root: UPath) -> None:
    key = f"{root} {sorted(root.storage_options.items())}"
    if key in _REACHED:
        return
    bucket, _, prefix = root.path.strip("/").partition("/")
    try:
        if hasattr(root.fs, "call_s3"):  # list the prefix only: IAM often grants ListBucket on it alone
            root.fs.call_s3(
                "list_objects_v2", Bucket=bucket, Prefix=f"{prefix}/" if prefix else "", MaxKeys=1
            )
        else:
            root.fs.ls(bucket, detail=False)
    except Exception as exc:  # noqa: BLE001 - every driver has its own errors; all mean the same here
        raise WarehouseError(
            f"warehouse {root} cannot be used ({type(exc).__name__}: {exc}); {_STORE_HELP}"
        ) from None
    _REACHED.add(key)


def sql_path_list(paths: Iterable[object]) -> str:
    """`paths` as the items of a SQL list of string literals (read_parquet([...])), each quoted: a view
    takes no parameters, so the paths are written into its text."""
    return ", ".join("'" + str(path).replace("'", "''") + "'" for path in paths)


def duckdb_paths(con: duckdb.DuckDBPyConnection, paths: Iterable[Path | UPath]) -> list[str]:
    """The strings DuckDB reads `paths` by: an object-store path gets its fsspec filesystem registered
    with `con` (DuckDB's own httpfs is not needed), so DuckDB reads the objects where they lie."""
    out = []
    for path in paths:
        if not isinstance(path, Path):
            fs = path.fs
            if not con.filesystem_is_registered(
                fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
            ):
                con.register_filesystem(fs)
        out.append(str(path))
    return out
