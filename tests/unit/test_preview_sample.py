"""The preview's sample reader on real feed files: which rows it passes on, and where it stops reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from firefeed.pipeline.parse import EncodingRestart, FeedReader, open_reader
from firefeed.preview.sample import SampleReader
from firefeed.preview.service import sample_ids


def csv_reader(tmp_path: Path, text: str | bytes) -> FeedReader:
    path = tmp_path / "feed.csv"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return open_reader(path, source="main", format="csv")


FEED = "id,title\nA1,one\n,no key\nA1,again\n  A2 ,two\nA3,three\nA4,four\n"


def test_the_first_n_keys_skip_empty_and_repeated_keys_and_stop_reading_there(tmp_path: Path) -> None:
    sample = SampleReader(csv_reader(tmp_path, FEED), "id", first=2)
    assert list(sample) == [(2, ["A1", "one"]), (5, ["  A2 ", "two"])]
    assert sample.kept == ["A1", "A2"]
    assert sample.rows_read == 4  # A3 and A4 were never read
    assert sample.fields == ["id", "title"]


def test_a_key_set_keeps_each_keys_first_row_and_stops_when_all_were_seen(tmp_path: Path) -> None:
    sample = SampleReader(csv_reader(tmp_path, FEED), "id", keys=frozenset({"A2", "A1"}))
    assert [values for _, values in sample] == [["A1", "one"], ["  A2 ", "two"]]
    assert sample.rows_read == 4
    missing = SampleReader(csv_reader(tmp_path, FEED), "id", keys=frozenset({"A4", "zz"}))
    assert [values for _, values in missing] == [["A4", "four"]]
    assert missing.rows_read == 6  # zz is nowhere: the whole file was read


def test_a_key_field_that_appears_late_in_a_json_feed_is_found(tmp_path: Path) -> None:
    path = tmp_path / "feed.jsonl"
    path.write_text('{"title": "no id yet"}\n{"title": "t", "id": "K1"}\n{"id": "K2"}\n', encoding="utf-8")
    sample = SampleReader(open_reader(path, source="main", format="jsonl"), "id", first=5)
    assert sample.kept == []
    rows = list(sample)
    assert sample.kept == ["K1", "K2"]
    assert [line for line, _ in rows] == [2, 3]


def test_iterating_again_after_an_encoding_restart_starts_the_sample_over(tmp_path: Path) -> None:
    good = "".join(f"K{i},naïve\n" for i in range(20_000)).encode()
    sample = SampleReader(
        csv_reader(tmp_path, b"id,t\n" + good + b"late,\x80uro\n"),
        "id",
        keys=frozenset({"K0", "late"}),
    )
    with pytest.raises(EncodingRestart):
        list(sample)
    rows = list(sample)
    assert rows == [(2, ["K0", "naÃ¯ve"]), (20_002, ["late", "€uro"])]
    assert sample.kept == ["K0", "late"]


def test_requested_ids_are_trimmed_deduplicated_and_never_empty() -> None:
    assert sample_ids([" A1", "A2", "A1 "]) == ["A1", "A2"]
    with pytest.raises(ValueError, match="item id 2 is empty"):
        sample_ids(["A1", " \u00a0"])
    with pytest.raises(ValueError, match="at most 1000"):
        sample_ids([str(i) for i in range(1001)])
    with pytest.raises(ValueError, match="either the first N keys or a set"):
        SampleReader(object(), "id")  # type: ignore[arg-type]
