"""Detect and undo a source file's compression, streamed and capped against decompression bombs.

A decompressed file has limits of its own, apart from the download's
(FIREFEED_FETCH_MAX_BYTES): an absolute cap, and an expansion ratio against the
compressed size that only applies past a floor, so that a small feed that
compresses very well is never refused while a 5 MB gzip can no longer write
gigabytes. Both are checked on every chunk before it is written.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Literal, Protocol

from firefeed.config import Settings
from firefeed.errors import FetchError, InvalidSourceRequestError

Compression = Literal["none", "gzip", "zip"]
COMPRESSIONS = ("auto", "none", "gzip", "zip")
CHUNK = 1024 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"


@dataclass(frozen=True)
class DecompressLimits:
    """How large a decompressed file may grow: a cap, and a ratio to the compressed size past a floor."""

    max_bytes: int
    max_ratio: float
    ratio_floor: int

    @classmethod
    def from_settings(cls, settings: Settings) -> DecompressLimits:
        return cls(
            max_bytes=settings.fetch_max_decompressed_bytes,
            max_ratio=settings.fetch_max_expansion_ratio,
            ratio_floor=settings.fetch_expansion_floor_bytes,
        )

    def check(self, size: int, compressed: int, *, source: str) -> None:
        """Refuse `size` decompressed bytes from `compressed` ones, naming the limit and its setting."""
        if size > self.max_bytes:
            raise FetchError(
                source,
                f"decompressed size exceeds the size cap of {self.max_bytes} bytes "
                "(FIREFEED_FETCH_MAX_DECOMPRESSED_BYTES; raise it if the feed really is this large)",
            )
        if size > self.ratio_floor and size > self.max_ratio * compressed:
            raise FetchError(
                source,
                f"decompressed more than {self.max_ratio:g}x its compressed size of {compressed} bytes "
                f"(FIREFEED_FETCH_MAX_EXPANSION_RATIO, checked past FIREFEED_FETCH_EXPANSION_FLOOR_BYTES = "
                f"{self.ratio_floor} bytes): a compression bomb, or raise the ratio if the feed is real",
            )


def detect(path: Path, declared: str, name_hint: str, *, source: str) -> Compression:
    """The compression to undo: the declared one, or for "auto" the magic bytes, then the suffix.

    A `.gz` name without gzip magic is treated as plain: a server that sends a
    `.gz` file with `Content-Encoding: gzip` has it decoded in transit. A `.zip`
    name is trusted even without magic, since a zip may start with other data.
    """
    if declared not in COMPRESSIONS:
        raise InvalidSourceRequestError(source, f"compression must be one of {', '.join(COMPRESSIONS)}")
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


def decompress(
    path: Path, kind: Compression, *, dest_dir: Path, limits: DecompressLimits, source: str
) -> tuple[Path, str]:
    """Write the decompressed content of `path` to a new temp file in `dest_dir`.

    Returns the temp file and the inner file name (a zip member's base name, or
    "" for gzip). The output is streamed in fixed-size chunks, each checked
    against `limits` before it is written, so memory stays flat and a bomb costs
    at most one limit; the partial output is removed on any failure. The ratio
    is taken against the whole compressed file's size on disk: that is what was
    downloaded, and no header the archive claims can make it smaller.
    """
    if kind == "none":
        raise ValueError("nothing to decompress")
    compressed = path.stat().st_size
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=".decompress-", suffix=".part")
    out_path = Path(tmp)
    try:
        with os.fdopen(fd, "wb") as out:
            if kind == "gzip":
                inner = ""
                _gunzip(path, out, limits=limits, compressed=compressed, source=source)
            else:
                inner = _unzip(path, out, limits=limits, compressed=compressed, source=source)
    except BaseException:
        out_path.unlink(missing_ok=True)
        raise
    return out_path, inner


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _copy_capped(src: _Readable, out: IO[bytes], *, limits: DecompressLimits, compressed: int, source: str) -> None:
    total = 0
    while chunk := src.read(CHUNK):
        total += len(chunk)
        limits.check(total, compressed, source=source)  # before the write: a crossing chunk is never written
        out.write(chunk)


def _gunzip(path: Path, out: IO[bytes], *, limits: DecompressLimits, compressed: int, source: str) -> None:
    try:
        with gzip.open(path, "rb") as src:
            _copy_capped(src, out, limits=limits, compressed=compressed, source=source)
    except (OSError, EOFError, zlib.error) as exc:
        # gzip.BadGzipFile is an OSError; EOFError means the file was cut short.
        raise FetchError(source, f"not a valid gzip file ({exc})") from exc


def _unzip(path: Path, out: IO[bytes], *, limits: DecompressLimits, compressed: int, source: str) -> str:
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
            # The declared size: refuse before inflating anything (a lying header is caught while streaming).
            limits.check(member.file_size, compressed, source=source)
            with archive.open(member) as src:
                _copy_capped(src, out, limits=limits, compressed=compressed, source=source)
            return PurePosixPath(member.filename.replace("\\", "/")).name
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        raise FetchError(source, f"not a valid zip file ({exc})") from exc
    except (RuntimeError, zlib.error) as exc:  # RuntimeError: an encrypted member
        raise FetchError(source, f"cannot read the zip archive ({exc})") from exc
