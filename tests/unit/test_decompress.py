"""Detecting and undoing compression, with the bomb cap."""

from __future__ import annotations

import gzip
import zipfile
import zlib
from pathlib import Path

import pytest

from firefeed.errors import FetchError
from firefeed.pipeline._decompress import decompress, detect, strip_suffix

DATA = b"id,title\n1,Shoe\n"


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def make_zip(path: Path, members: dict[str, bytes], dirs: tuple[str, ...] = ()) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for d in dirs:
            zf.writestr(zipfile.ZipInfo(d), b"")
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


def test_auto_detects_gzip_by_magic_whatever_the_name(tmp_path: Path) -> None:
    assert detect(write(tmp_path / "feed", gzip.compress(DATA)), "auto", "feed.csv", source="s") == "gzip"


def test_auto_detects_zip_by_magic_or_suffix(tmp_path: Path) -> None:
    assert detect(make_zip(tmp_path / "a", {"x.csv": DATA}), "auto", "download", source="s") == "zip"
    assert detect(write(tmp_path / "b", b"junk" + DATA), "auto", "feed.ZIP", source="s") == "zip"


def test_a_gz_name_without_gzip_magic_is_plain(tmp_path: Path) -> None:
    # What a server that applied Content-Encoding: gzip to a .gz file leaves after decoding.
    assert detect(write(tmp_path / "f", DATA), "auto", "feed.csv.gz", source="s") == "none"


def test_plain_data_is_none(tmp_path: Path) -> None:
    assert detect(write(tmp_path / "f", DATA), "auto", "feed.csv", source="s") == "none"
    assert detect(write(tmp_path / "e", b""), "auto", "empty.csv", source="s") == "none"


def test_a_declared_compression_wins(tmp_path: Path) -> None:
    assert detect(write(tmp_path / "f", gzip.compress(DATA)), "none", "f.gz", source="s") == "none"
    assert detect(write(tmp_path / "g", DATA), "gzip", "f.csv", source="s") == "gzip"


def test_an_unknown_compression_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="compression must be one of auto, none, gzip, zip"):
        detect(write(tmp_path / "f", DATA), "xz", "f", source="s")


@pytest.mark.parametrize(
    ("name", "stripped"),
    [("a.csv.gz", "a.csv"), ("a.CSV.ZIP", "a.CSV"), ("a.csv", "a.csv"), (".gz", ".gz")],
)
def test_strip_suffix(name: str, stripped: str) -> None:
    assert strip_suffix(name) == stripped


def test_gzip_is_decompressed_including_several_members(tmp_path: Path) -> None:
    src = write(tmp_path / "f.gz", gzip.compress(DATA) + gzip.compress(b"2,Boot\n"))
    out, inner = decompress(src, "gzip", dest_dir=tmp_path, max_bytes=1000, source="s")
    assert out.read_bytes() == DATA + b"2,Boot\n" and inner == ""


def test_a_zip_with_one_file_and_folders_gives_that_file(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "f.zip", {"export/2025/products.csv": DATA}, dirs=("export/", "export/2025/"))
    out, inner = decompress(src, "zip", dest_dir=tmp_path, max_bytes=1000, source="s")
    assert out.read_bytes() == DATA and inner == "products.csv"


def test_a_zip_with_several_files_lists_them(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "f.zip", {"a.csv": DATA, "b.csv": DATA})
    with pytest.raises(FetchError, match=r"exactly one file, it holds a\.csv, b\.csv"):
        decompress(src, "zip", dest_dir=tmp_path, max_bytes=1000, source="s")
    assert temp_files(tmp_path) == []


def test_an_empty_zip_is_an_error(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "f.zip", {}, dirs=("only/",))
    with pytest.raises(FetchError, match="holds no file"):
        decompress(src, "zip", dest_dir=tmp_path, max_bytes=1000, source="s")


def test_a_gzip_bomb_stops_at_the_cap(tmp_path: Path) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    src = write(tmp_path / "bomb.gz", b"".join(packer.compress(chunk) for _ in range(64)) + packer.flush())
    with pytest.raises(FetchError, match="decompressed size exceeds the size cap of 2097152 bytes"):
        decompress(src, "gzip", dest_dir=tmp_path, max_bytes=2 << 20, source="s")
    assert temp_files(tmp_path) == []


def test_a_zip_bomb_is_refused_by_its_declared_size(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "bomb.zip", {"x.csv": b"\0" * (4 << 20)})
    with pytest.raises(FetchError, match="decompressed size exceeds"):
        decompress(src, "zip", dest_dir=tmp_path, max_bytes=1 << 20, source="s")
    assert temp_files(tmp_path) == []


def test_a_zip_member_that_lies_about_its_size_still_stops_at_the_cap(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "bomb.zip", {"x.csv": b"\0" * (4 << 20)})
    raw = bytearray(src.read_bytes())
    size = (4 << 20).to_bytes(4, "little")
    fake = (100).to_bytes(4, "little")
    # Patch the uncompressed size in the local header (offset 22) and central directory.
    raw[22:26] = fake
    at = raw.rindex(b"PK\x01\x02")
    assert raw[at + 24 : at + 28] == size
    raw[at + 24 : at + 28] = fake
    src.write_bytes(bytes(raw))
    with pytest.raises(FetchError):
        decompress(src, "zip", dest_dir=tmp_path, max_bytes=1 << 20, source="s")
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize("data", [b"\x1f\x8bnot really gzip", gzip.compress(DATA)[:-6]])
def test_a_broken_gzip_is_a_fetch_error(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(FetchError, match="not a valid gzip file"):
        decompress(write(tmp_path / "f.gz", data), "gzip", dest_dir=tmp_path, max_bytes=1000, source="s")
    assert temp_files(tmp_path) == []


def test_a_broken_zip_is_a_fetch_error(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="not a valid zip file"):
        decompress(
            write(tmp_path / "f.zip", b"PK\x03\x04garbage"),
            "zip",
            dest_dir=tmp_path,
            max_bytes=1000,
            source="s",
        )
