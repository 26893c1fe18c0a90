"""`firefeed fleet` prints each child's output line by line, with the child's name in front."""

from __future__ import annotations

import argparse

from firefeed.commands._procs import LinePrefixer
from firefeed.commands.fleet import fleet_children


def test_complete_lines_are_prefixed_and_padded_to_the_widest_name() -> None:
    p = LinePrefixer("api", width=6)
    assert p.feed(b"one\ntwo\n") == ["api    | one", "api    | two"]


def test_a_line_cut_between_two_reads_is_printed_once_and_whole() -> None:
    p = LinePrefixer("import")
    assert p.feed(b"[INFO] fet") == []
    assert p.feed(b"ched 3 rows\n[INFO] pa") == ["import | [INFO] fetched 3 rows"]
    assert p.feed(b"rsed\n") == ["import | [INFO] parsed"]


def test_the_last_line_without_a_newline_is_printed_at_the_end_of_the_stream() -> None:
    p = LinePrefixer("beat")
    assert p.feed(b"bye") == []
    assert p.flush() == ["beat | bye"]
    assert p.flush() == []


def test_carriage_returns_and_bytes_that_are_not_utf8_do_not_break_a_line() -> None:
    p = LinePrefixer("rules")
    assert p.feed(b"windows\r\ncaf\xc3\xa9 \xff\n\n") == ["rules | windows", "rules | café \ufffd", "rules | "]


def test_a_multibyte_character_split_between_reads_survives() -> None:
    p = LinePrefixer("export")
    assert p.feed(b"caf\xc3") == []
    assert p.feed(b"\xa9\n") == ["export | café"]


def test_the_fleet_is_the_api_a_worker_per_queue_beat_and_flower() -> None:
    args = argparse.Namespace(host="127.0.0.1", port=8123, flower_port=5566, loglevel="INFO")
    children = fleet_children(args, {"A": "1"}, {"FIREFEED_FLOWER_PASSWORD": "pw"}, python="py")
    assert [c.name for c in children] == [
        "api",
        "pipeline",
        "import",
        "rules",
        "export",
        "control",
        "sync",
        "beat",
        "flower",
    ]
    assert children[0].argv == ["py", "-m", "firefeed.cli", "api", "--host", "127.0.0.1", "--port", "8123"]
    assert children[2].argv == ["py", "-m", "firefeed.cli", "worker", "import", "--loglevel", "INFO"]
    assert children[-1].argv[3:] == ["flower", "--port", "5566", "--address", "127.0.0.1"]
    # Only Flower gets the generated password.
    assert children[-1].env == {"A": "1", "FIREFEED_FLOWER_PASSWORD": "pw"}
    assert all("FIREFEED_FLOWER_PASSWORD" not in c.env for c in children[:-1])
