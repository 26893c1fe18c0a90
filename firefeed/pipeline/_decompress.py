"""Detect and undo a source file's compression, streamed and capped against decompression bombs."""

from __future__ import annotations

import gzip
import os
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Literal, Protocol

from firefeed.errors import FetchError

Compression = Literal["none", "gzip", "zip"]
COMPRESSIONS = ("auto", "none", "gzip", "zip")
CHUNK = 1024 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"


def detect(path: Path, declared: str, name_hint: str, *, source: str) -> Compression:
    """The compression to undo: the declared one, or for "auto" the magic bytes, then the suffix.

    A `.gz` name without gzip magic is treated as plain: a server that sends a
    `.gz` file with `Content-Encoding: gzip` has it decoded in transit. A `.zip`
    name is trusted even without magic, since a zip may start with other data.
    """
    if declared not in COMPRESSIONS:
        raise FetchError(source, f"compression must be one of {', '.join(COMPRESSIONS)}")
    if declared != "auto":
        return declared  # type: ignore[return-value]
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    if head == _ZIP_MAGIC or name_hint.lower().endswith(".zip"):
        return "zip"
    return "none"


def strip_suffix(name: str) -> str:
    """`shoes.csv.gz` -> `shoes.csv`: the name the decompressed file would have."""
    for suffix in (".gz", ".gzip", ".zip"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def decompress(path: Path, kind: Compression, *, dest_dir: Path, max_bytes: int, source: str) -> tuple[Path, str]:
    """Write the decompressed content of `path` to a new temp file in `dest_dir`.

    Returns the temp file and the inner file name (a zip member's base name, or
    "" for gzip). The output is streamed in fixed-size chunks and stops as soon
    as it passes `max_bytes`, so memory stays flat and a bomb costs at most the cap.
    """
    if kind == "none":
        raise ValueError("nothing to decompress")
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=".decompress-", suffix=".part")
    out_path = Path(tmp)
    try:
        with os.fdopen(fd, "wb") as out:
            if kind == "gzip":
                inner = ""
                _gunzip(path, out, max_bytes=max_bytes, source=source)
            else:
                inner = _unzip(path, out, max_bytes=max_bytes, source=source)
    except BaseException:
        out_path.unlink(missing_ok=True)
        raise
    return out_path, inner


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _copy_capped(src: _Readable, out: IO[bytes], *, max_bytes: int, source: str) -> None:
    total = 0
    while chunk := src.read(CHUNK):
        total += len(chunk)
        if total > max_bytes:
            raise FetchError(source, f"decompressed size exceeds the size cap of {max_bytes} bytes")
        out.write(chunk)


def _gunzip(path: Path, out: IO[bytes], *, max_bytes: int, source: str) -> None:
    try:
        with gzip.open(path, "rb") as src:
            _copy_capped(src, out, max_bytes=max_bytes, source=source)
    except (OSError, EOFError, zlib.error) as exc:
        # gzip.BadGzipFile is an OSError; EOFError means the file was cut short.
        raise FetchError(source, f"not a valid gzip file ({exc})") from exc


def _unzip(path: Path, out: IO[bytes], *, max_bytes: int, source: str) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.infolist() if not m.is_dir()]
            if not members:
                raise FetchError(source, "the zip archive holds no file")
            if len(members) > 1:
                names = ", ".join(m.filename for m in members[:20])
                more = f" and {len(members) - 20} more" if len(members) > 20 else ""
                raise FetchError(source, f"the zip archive must hold exactly one file, it holds {names}{more}")
            member = members[0]
            if member.file_size > max_bytes:  # declared size: refuse before inflating anything
                raise FetchError(source, f"decompressed size exceeds the size cap of {max_bytes} bytes")
            with archive.open(member) as src:
                _copy_capped(src, out, max_bytes=max_bytes, source=source)
            return PurePosixPath(member.filename.replace("\\", "/")).name
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        raise FetchError(source, f"not a valid zip file ({exc})") from exc
    except (RuntimeError, zlib.error) as exc:  # RuntimeError: an encrypted member
        raise FetchError(source, f"cannot read the zip archive ({exc})") from exc
