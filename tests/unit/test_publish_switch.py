"""The publish's switch (pipeline/publishing.py) can be run again from the start, by anyone, any number of times."""

from __future__ import annotations

from pathlib import Path

from firefeed.pipeline.publishing import switch
from firefeed.storage import LocalStorage
from firefeed.storage.keys import partial_key

RUN = "0123abcd-0000-0000-0000-000000000000"
KEYS = ["acme/shoes/feed.csv", "acme/shoes/sub/feed.json", "acme/shoes/google.xml"]


def _written(tmp_path: Path) -> tuple[LocalStorage, list[list[str]]]:
    """Three published files of a previous run, and this run's three partials beside them."""
    storage = LocalStorage(tmp_path)
    for key in KEYS:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(b"old " + key.encode())
        (tmp_path / partial_key(key, RUN)).write_bytes(b"new " + key.encode())
    return storage, [[partial_key(key, RUN), key] for key in KEYS]


def test_a_switch_run_again_after_a_death_skips_what_was_moved_and_moves_the_rest(tmp_path: Path) -> None:
    storage, moves = _written(tmp_path)
    storage.move(*moves[0])  # a driver that died after its first switch
    seen: list[int] = []
    switch(storage, moves, after=seen.append)
    assert seen == [0, 1, 2, 3]
    assert {key: (tmp_path / key).read_bytes() for key in KEYS} == {key: b"new " + key.encode() for key in KEYS}
    assert storage.list("acme/shoes") == sorted(KEYS)


def test_a_switch_already_complete_changes_nothing(tmp_path: Path) -> None:
    storage, moves = _written(tmp_path)
    switch(storage, moves)
    switch(storage, moves)
    assert {key: (tmp_path / key).read_bytes() for key in KEYS} == {key: b"new " + key.encode() for key in KEYS}
