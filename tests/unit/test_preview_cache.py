"""The preview's cache of sample rows (#53): per company, bounded in entries, bytes and age, and used only
while the file's validators are the same."""

from __future__ import annotations

import time
from pathlib import Path

from firefeed.pipeline.fetch import FetchResult, Validators
from firefeed.pipeline.parse import ParseStats
from firefeed.preview.cache import Replay, SampleCache, SourceRows, cache_key, validator_of


def rows(n: int = 3, width: int = 10) -> SourceRows:
    return SourceRows(
        fields=["id", "title"],
        rows=[(i + 2, [f"K{i}", "x" * width]) for i in range(n)],
        keys=[f"K{i}" for i in range(n)],
        stats=ParseStats(rows=n),
        lists=frozenset(),
        delimited={},
        lists_filled=False,
        bytes=100,
        rows_read=n,
        validator=("stat", 1),
    )


def test_an_entry_is_the_companys_alone() -> None:
    cache = SampleCache()
    key = cache_key("acme", {"name": "main", "url": "a.csv"}, primary=True, sample=[20, None], extra=[])
    cache.put("acme", key, rows())
    assert cache.get("acme", key) is not None
    assert cache.get("evil", key) is None
    other = cache_key("evil", {"name": "main", "url": "a.csv"}, primary=True, sample=[20, None], extra=[])
    assert other != key and cache.get("evil", other) is None


def test_entries_past_the_companys_count_the_bytes_or_the_age_are_dropped_oldest_first() -> None:
    cache = SampleCache(per_company=2, max_bytes=10_000_000, ttl_s=60)
    for i in range(3):
        cache.put("acme", f"k{i}", rows())
    assert cache.get("acme", "k0") is None and cache.get("acme", "k2") is not None
    assert cache.held("acme") == 2
    cache.put("other", "k0", rows())
    assert cache.held("other") == 1  # one company's entries never push out another's count

    small = SampleCache(max_bytes=40_000)
    for i in range(10):
        small.put(f"c{i}", "k", rows(n=10, width=200))
    assert 0 < small.size <= 40_000
    assert small.get("c9", "k") is not None and small.get("c0", "k") is None

    assert SampleCache(max_bytes=1000).put("acme", "k", rows(n=100, width=100)) is None
    old = SampleCache(ttl_s=0.01)
    old.put("acme", "k", rows())
    time.sleep(0.02)
    assert old.get("acme", "k") is None and old.size == 0


def test_a_replay_passes_on_copies_of_the_kept_rows() -> None:
    kept = rows()
    replay = Replay("main", kept)
    first = list(replay)
    first[0][1][1] = "changed by staging"
    assert next(v for _, v in Replay("main", kept)) == ["K0", "x" * 10]
    assert replay.fields == ["id", "title"] and replay.kept == ["K0", "K1", "K2"]


def test_a_local_file_changed_in_place_has_another_validator(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("id\nA\n")
    fetched = FetchResult(f, 4, False, Validators(), None, f.as_uri())
    before = validator_of(fetched, None)
    time.sleep(0.01)
    f.write_text("id\nB\n")  # same size
    assert validator_of(fetched, None) != before
    http = FetchResult(tmp_path / "x", 4, False, Validators(etag='"v1"'), None, "https://h/x.csv")
    assert validator_of(http, None) == ("http", '"v1"', None, 4)
    kept = rows()
    same = FetchResult(None, 0, True, Validators(etag='"v1"'), None, "https://h/x.csv")
    assert validator_of(same, kept) == kept.validator
    (tmp_path / "x").write_bytes(b"id\nA\n")
    unknown = FetchResult(tmp_path / "x", 4, False, Validators(), None, "https://h/x.csv")
    assert validator_of(unknown, None) == validator_of(unknown, None)
    assert validator_of(unknown, None)[0] == "sha256"  # type: ignore[index]
    (tmp_path / "x").write_bytes(b"id\nB\n")
    assert validator_of(unknown, None) != before


def test_an_entry_weighs_at_least_what_its_texts_hold_in_memory() -> None:
    """A value's characters are not its bytes: a text of emoji holds 4 bytes a character, so counting
    characters let the cache hold four times MAX_BYTES of such rows."""
    import sys

    wide = SourceRows(
        fields=["id", "title"],
        rows=[(i + 2, [f"K{i}", "\U0001f600" * 1000]) for i in range(20)],
        keys=[f"K{i}" for i in range(20)],
        stats=ParseStats(rows=20),
        lists=frozenset(),
        delimited={},
        lists_filled=False,
        bytes=100,
        rows_read=20,
        validator=("stat", 1),
    ).measured()
    held = sum(sys.getsizeof(v) for _, values in wide.rows for v in values) + sum(sys.getsizeof(k) for k in wide.keys)
    assert wide.size >= held
    cache = SampleCache(max_bytes=8 * wide.size)
    cache.put("acme", "k", wide)
    assert cache.size >= held
