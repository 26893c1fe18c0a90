"""Where exports and a run's downloads live, so workers on several machines share them.

Two areas, one backend (FIREFEED_STORAGE_URL):

| FIREFEED_STORAGE_URL | exports area | runs area (raw downloads) |
|---|---|---|
| unset (default) | FIREFEED_EXPORT_DIR | FIREFEED_DATA_DIR/runs |
| `file:///shared/ff` or `/shared/ff` | `/shared/ff/exports` | `/shared/ff/runs` |
| `s3://bucket/prefix` | `s3://bucket/prefix/exports` | `s3://bucket/prefix/runs` |

The default keeps FireFeed's original layout on the worker's own disk (fine on
one machine, or with FIREFEED_EXPORT_DIR on a shared mount); a URL puts both
areas on storage every worker reaches.
"""

from __future__ import annotations

import io
import uuid
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from firefeed.errors import ConfigError, StorageError
from firefeed.storage.base import Storage
from firefeed.storage.local import LocalStorage
from firefeed.storage.object_store import ObjectStorage

if TYPE_CHECKING:
    from firefeed.config import Settings

__all__ = [
    "LocalStorage",
    "ObjectStorage",
    "Storage",
    "export_storage",
    "parse_storage_url",
    "probe_storage",
    "run_storage",
]

_OBJECT_SCHEMES = ("s3",)


def parse_storage_url(url: str) -> tuple[str, str]:
    """(protocol, root) of a FIREFEED_STORAGE_URL: ("file", folder) or ("s3", "bucket/prefix").

    ValueError says what is wrong with the value (the settings name the variable).
    """
    text = url.strip()
    if "://" not in text:
        if not text:
            raise ValueError("must be a folder, file:///folder or s3://bucket/prefix")
        return "file", text
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if parts.query or parts.fragment:
        raise ValueError(f"{text!r} must not have a query or fragment")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"{text!r}: a file:// URL names a local folder (file:///path), not a host")
        return "file", unquote(parts.path)
    if scheme in _OBJECT_SCHEMES:
        if not parts.netloc:
            raise ValueError(f"{text!r} names no bucket (s3://bucket/prefix)")
        root = f"{parts.netloc}/{parts.path.strip('/')}".strip("/")
        if any(p in (".", "..") for p in root.split("/")) or "//" in root:
            raise ValueError(f"{text!r} has an empty, '.' or '..' part")
        return scheme, root
    raise ValueError(f"scheme {scheme}:// is not supported: use a folder, file:///folder or s3://bucket/prefix")


def export_storage(settings: Settings) -> Storage:
    """The exports area: `<company>/<project>/<path>` keys."""
    return _areas_of(settings)[0]


def run_storage(settings: Settings) -> Storage:
    """The runs area: `<run_id>/...` keys (raw downloads between FETCH and PARSE)."""
    return _areas_of(settings)[1]


def _areas_of(settings: Settings) -> tuple[Storage, Storage]:
    s = settings
    return _areas(s.storage_url, s.storage_endpoint_url, s.export_dir, s.data_dir, s.export_spare_min_bytes)


@lru_cache(maxsize=16)
def _areas(
    url: str | None, endpoint: str | None, export_dir: Path, data_dir: Path, spare_min_bytes: int = 0
) -> tuple[Storage, Storage]:
    if url is None:
        return LocalStorage(export_dir, spare_min_bytes=spare_min_bytes), LocalStorage(data_dir / "runs")
    try:
        protocol, root = parse_storage_url(url)
    except ValueError as exc:
        raise ConfigError(f"FIREFEED_STORAGE_URL: {exc}") from exc
    if protocol == "file":
        return LocalStorage(Path(root) / "exports", spare_min_bytes=spare_min_bytes), LocalStorage(Path(root) / "runs")
    options: dict[str, Any] = {"use_listings_cache": False}  # other machines change the bucket: never trust a listing
    if endpoint:
        options["endpoint_url"] = endpoint
    spool = data_dir / "spool"
    return (
        ObjectStorage(protocol, f"{root}/exports", spool_dir=spool, options=options),
        ObjectStorage(protocol, f"{root}/runs", spool_dir=spool, options=options),
    )


def probe_storage(settings: Settings) -> str:
    """Write, read back, list and delete a small object in the runs area: what every worker will do.

    Returns where the storage is; raises StorageError (or UnsafePathError) naming what failed.
    """
    runs = run_storage(settings)
    key = f".probe-{uuid.uuid4().hex}"
    payload = b"firefeed storage probe\n"
    runs.put_stream(io.BytesIO(payload), f"{key}/probe.txt")
    try:
        if runs.read_bytes(f"{key}/probe.txt") != payload:
            raise StorageError(f"{runs.url(key)}: the object read back differs from the one written")
        if runs.list(key) != [f"{key}/probe.txt"]:
            raise StorageError(f"{runs.url(key)}: the object written is not listed")
    finally:
        runs.delete_tree(key)
    return f"exports {export_storage(settings).url()}, downloads {runs.url()}"
