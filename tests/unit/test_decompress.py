"""Detecting and undoing compression, with the bomb limits: a decompressed-size cap and an expansion ratio."""

from __future__ import annotations

import gzip
import os
import random
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any

import pytest

from firefeed.config import Settings
from firefeed.errors import FetchError
from firefeed.pipeline import _decompress
from firefeed.pipeline._decompress import DecompressLimits, decompress, detect, strip_suffix
from firefeed.pipeline.fetch import fetch_source

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


def caps(max_bytes: int = 1 << 30, ratio: float = 100.0, floor: int = 1 << 30) -> DecompressLimits:
    """Limits for a test: the cap alone unless a ratio floor is given."""
    return DecompressLimits(max_bytes=max_bytes, max_ratio=ratio, ratio_floor=floor)


def gzip_bomb(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    zeros = b"\0" * (1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(megabytes)) + packer.flush()


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
    out, inner = decompress(src, "gzip", dest_dir=tmp_path, limits=caps(1000), source="s")
    assert out.read_bytes() == DATA + b"2,Boot\n" and inner == ""


def test_a_zip_with_one_file_and_folders_gives_that_file(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "f.zip", {"export/2025/products.csv": DATA}, dirs=("export/", "export/2025/"))
    out, inner = decompress(src, "zip", dest_dir=tmp_path, limits=caps(1000), source="s")
    assert out.read_bytes() == DATA and inner == "products.csv"


def test_a_zip_with_several_files_lists_them(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "f.zip", {"a.csv": DATA, "b.csv": DATA})
    with pytest.raises(FetchError, match=r"exactly one file, it holds a\.csv, b\.csv"):
        decompress(src, "zip", dest_dir=tmp_path, limits=caps(1000), source="s")
    assert temp_files(tmp_path) == []


def test_an_empty_zip_is_an_error(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "f.zip", {}, dirs=("only/",))
    with pytest.raises(FetchError, match="holds no file"):
        decompress(src, "zip", dest_dir=tmp_path, limits=caps(1000), source="s")


def test_a_gzip_bomb_stops_at_the_cap(tmp_path: Path) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    src = write(tmp_path / "bomb.gz", b"".join(packer.compress(chunk) for _ in range(64)) + packer.flush())
    with pytest.raises(FetchError, match="decompressed size exceeds the size cap of 2097152 bytes"):
        decompress(src, "gzip", dest_dir=tmp_path, limits=caps(2 << 20), source="s")
    assert temp_files(tmp_path) == []


def test_a_zip_bomb_is_refused_by_its_declared_size(tmp_path: Path) -> None:
    src = make_zip(tmp_path / "bomb.zip", {"x.csv": b"\0" * (4 << 20)})
    with pytest.raises(FetchError, match="decompressed size exceeds"):
        decompress(src, "zip", dest_dir=tmp_path, limits=caps(1 << 20), source="s")
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
        decompress(src, "zip", dest_dir=tmp_path, limits=caps(1 << 20), source="s")
    assert temp_files(tmp_path) == []


# Ids by name: gzip.compress stamps the time, and every pytest-xdist worker must collect the same ids.
@pytest.mark.parametrize("data", [b"\x1f\x8bnot really gzip", gzip.compress(DATA)[:-6]], ids=["not-gzip", "truncated"])
def test_a_broken_gzip_is_a_fetch_error(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(FetchError, match="not a valid gzip file"):
        decompress(write(tmp_path / "f.gz", data), "gzip", dest_dir=tmp_path, limits=caps(1000), source="s")
    assert temp_files(tmp_path) == []


def test_a_broken_zip_is_a_fetch_error(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="not a valid zip file"):
        decompress(
            write(tmp_path / "f.zip", b"PK\x03\x04garbage"),
            "zip",
            dest_dir=tmp_path,
            limits=caps(1000),
            source="s",
        )


# ------------------------------------------------------------ the expansion ratio and the separate cap


class WriteSpy:
    """Records how many bytes `decompress` wrote to its output, to see it stop at the limit, not after."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.written = 0
        real_fdopen = os.fdopen
        spy = self

        class Counting:
            def __init__(self, f: IO[Any]) -> None:
                self.f = f

            def write(self, data: bytes) -> int:
                spy.written += len(data)
                return self.f.write(data)

            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: object) -> None:
                self.f.close()

        monkeypatch.setattr(_decompress.os, "fdopen", lambda fd, mode: Counting(real_fdopen(fd, mode)))


def text_feed(rows: int) -> bytes:
    """A CSV that gzip shrinks about 8x, as real catalogs do (a small vocabulary, repeated columns)."""
    rng = random.Random(15)
    words = ["Shoe", "Boot", "Red", "Blue", "Leather", "Canvas", "Men", "Women", "Size", "Sale"]
    lines = [b"id,title,description,price,stock,availability\n"]
    for i in range(rows):
        title = " ".join(rng.choice(words) for _ in range(3))
        price = rng.choice(["19.99", "29.99", "49.00"])
        line = f"{i},{title},A comfortable {title.lower()} for every day,{price},{rng.randint(0, 50)},in stock\n"
        lines.append(line.encode())
    return b"".join(lines)


def test_a_gzip_bomb_is_stopped_by_the_ratio_as_soon_as_it_passes_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = write(tmp_path / "bomb.gz", gzip_bomb(64))  # 64 MiB of zeros in about 64 KB
    compressed = src.stat().st_size
    spy = WriteSpy(monkeypatch)
    limits = caps(max_bytes=1 << 30, ratio=10, floor=1 << 20)
    with pytest.raises(FetchError) as err:
        decompress(src, "gzip", dest_dir=tmp_path, limits=limits, source="main")
    assert err.value.message == (
        f"source 'main': decompressed more than 10x its compressed size of {compressed} bytes "
        "(FIREFEED_FETCH_MAX_EXPANSION_RATIO, checked past FIREFEED_FETCH_EXPANSION_FLOOR_BYTES = "
        "1048576 bytes): a compression bomb, or raise the ratio if the feed is real"
    )
    # Streamed: it stopped at the first chunk past the floor (1 MiB), not after inflating 64 MiB.
    assert spy.written <= 1 << 20
    assert temp_files(tmp_path) == []


def test_the_ratio_is_not_applied_below_the_floor(tmp_path: Path) -> None:
    src = write(tmp_path / "small.gz", gzip_bomb(2))  # ratio about 1000, but only 2 MiB out
    out, _ = decompress(src, "gzip", dest_dir=tmp_path, limits=caps(ratio=10, floor=4 << 20), source="s")
    assert out.stat().st_size == 2 << 20


def test_a_legit_gzip_of_ratio_about_8_passes_the_default_ratio(tmp_path: Path) -> None:
    data = text_feed(20_000)
    src = write(tmp_path / "feed.csv.gz", gzip.compress(data))
    ratio = len(data) / src.stat().st_size
    assert 6 < ratio < 15, ratio
    # A floor far below the file's size, so the ratio is really checked; 100 is the default.
    limits = caps(ratio=Settings(_env_file=None).fetch_max_expansion_ratio, floor=1024)  # type: ignore[call-arg]
    out, _ = decompress(src, "gzip", dest_dir=tmp_path, limits=limits, source="s")
    assert out.read_bytes() == data
    # The same file against a ratio below its own is refused: the check did run.
    with pytest.raises(FetchError, match="decompressed more than 5x"):
        decompress(src, "gzip", dest_dir=tmp_path, limits=caps(ratio=5, floor=1024), source="s")


def test_a_zip_bomb_is_refused_by_the_ratio_before_inflating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_zip(tmp_path / "bomb.zip", {"feed.csv": b"\0" * (16 << 20)})
    spy = WriteSpy(monkeypatch)
    with pytest.raises(FetchError, match=r"source 'main': decompressed more than 100x .*EXPANSION_RATIO"):
        decompress(src, "zip", dest_dir=tmp_path, limits=caps(ratio=100, floor=1 << 20), source="main")
    assert spy.written == 0  # the declared size alone was enough
    assert temp_files(tmp_path) == []


def test_a_legit_zip_passes_the_ratio(tmp_path: Path) -> None:
    data = text_feed(20_000)
    src = make_zip(tmp_path / "feed.zip", {"feed.csv": data})
    out, inner = decompress(src, "zip", dest_dir=tmp_path, limits=caps(ratio=100, floor=1024), source="s")
    assert out.read_bytes() == data and inner == "feed.csv"


def test_the_cap_names_its_setting_and_stops_streaming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write(tmp_path / "big.gz", gzip_bomb(16))
    spy = WriteSpy(monkeypatch)
    with pytest.raises(FetchError) as err:
        decompress(src, "gzip", dest_dir=tmp_path, limits=caps(max_bytes=3 << 20), source="main")
    assert err.value.message == (
        "source 'main': decompressed size exceeds the size cap of 3145728 bytes "
        "(FIREFEED_FETCH_MAX_DECOMPRESSED_BYTES; raise it if the feed really is this large)"
    )
    assert spy.written <= 3 << 20
    assert temp_files(tmp_path) == []


def test_the_limits_come_from_their_own_settings() -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        fetch_max_bytes=1000,
        fetch_max_decompressed_bytes=5000,
        fetch_max_expansion_ratio=7,
        fetch_expansion_floor_bytes=300,
    )
    assert DecompressLimits.from_settings(settings) == DecompressLimits(5000, 7, 300)
    defaults = DecompressLimits.from_settings(Settings(_env_file=None))  # type: ignore[call-arg]
    assert defaults == DecompressLimits(10 * 1024**3, 100, 64 * 1024**2)


# ------------------------------------------------------------ through FETCH (a local source, no network)


def fetch_local(tmp_path: Path, name: str, **settings: Any) -> Path:
    values: dict[str, Any] = {"fetch_max_bytes": 10 << 20, "local_sources_root": None, **settings}
    result = fetch_source(
        source="main",
        url=name,
        dest_dir=tmp_path / "dl",
        base_dir=tmp_path,
        headers=None,
        previous=None,
        settings=Settings(_env_file=None, **values),  # type: ignore[call-arg]
    )
    assert result.path is not None
    return result.path


def test_fetch_caps_the_decompressed_size_apart_from_the_download(tmp_path: Path) -> None:
    data = text_feed(20_000)
    (tmp_path / "feed.csv.gz").write_bytes(gzip.compress(data))
    # The download cap is below the decompressed size: it bounds the download only (it used to bound both).
    out = fetch_local(tmp_path, "feed.csv.gz", fetch_max_bytes=len(data) // 2)
    assert out.read_bytes() == data
    with pytest.raises(FetchError, match=r"size cap of 100000 bytes \(FIREFEED_FETCH_MAX_DECOMPRESSED_BYTES"):
        fetch_local(tmp_path, "feed.csv.gz", fetch_max_decompressed_bytes=100_000)
    assert list((tmp_path / "dl").iterdir()) == [out]  # nothing left of the refused one


def test_fetch_refuses_a_bomb_by_the_expansion_ratio(tmp_path: Path) -> None:
    (tmp_path / "bomb.csv.gz").write_bytes(gzip_bomb(8))
    with pytest.raises(FetchError, match="source 'main': decompressed more than 50x"):
        fetch_local(tmp_path, "bomb.csv.gz", fetch_max_expansion_ratio=50, fetch_expansion_floor_bytes=1 << 20)
    assert list((tmp_path / "dl").iterdir()) == []
