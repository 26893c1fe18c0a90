"""A reader's rows as COPY frames: chunking, growing fields, COPY text, and the parser child process."""

from __future__ import annotations

import errno
import multiprocessing
import pickle
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firefeed.errors import ParseError
from firefeed.pipeline.parse import _child, _chunks, open_reader
from firefeed.pipeline.parse._base import ParseStats
from firefeed.pipeline.parse._chunks import Block, End, Fields, Frame, escape_block, frames
from firefeed.pipeline.parse.csv_reader import CsvReader
from tests.parser_children import record_parser_children


class GrowingReader:
    """Rows given as (fields after the row, values): fields grow like a json/xml feed's."""

    def __init__(self, script: list[tuple[list[str], list[str]]]) -> None:
        self.script = script
        self.fields: list[str] = []
        self.stats = ParseStats()

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        for line, (fields, values) in enumerate(self.script, 1):
            self.fields = list(fields)
            yield line, values


def decoded(frame: Frame) -> Any:
    """A frame with its COPY text split into rows of fields, for comparing."""
    if isinstance(frame, Block):
        text = (escape_block(frame.data) if frame.joined else frame.data).decode()
        return ("block", [row.split("\t") for row in text.splitlines()], frame.last)
    return frame


def test_chunks_are_cut_into_blocks_and_the_last_block_of_each_chunk_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_chunks, "BLOCK_ROWS", 2)
    reader = GrowingReader([(["a"], [str(i)]) for i in range(7)])
    got = [decoded(f) for f in frames(reader, chunk_rows=3)]
    assert got == [
        Fields(["a"]),
        ("block", [["1", "1", "0"], ["2", "2", "1"]], False),
        ("block", [["3", "3", "2"]], True),
        ("block", [["4", "4", "3"], ["5", "5", "4"]], False),
        ("block", [["6", "6", "5"]], True),
        ("block", [["7", "7", "6"]], True),
        End(),
    ]


def test_a_wider_row_ends_the_chunk_and_brings_the_fields_known_when_it_was_read() -> None:
    reader = GrowingReader(
        [
            (["a"], ["1"]),
            (["a", "b", "c"], ["2", "x"]),  # the reader knows c already; the row stops at b
            (["a", "b", "c"], ["3"]),
            (["a", "b", "c", "d"], ["4", "", "", "y"]),
        ]
    )
    got = [decoded(f) for f in frames(reader, chunk_rows=10)]
    assert got == [
        Fields(["a"]),
        ("block", [["1", "1", "1"]], True),
        Fields(["a", "b", "c"]),
        ("block", [["2", "2", "2", "x", ""], ["3", "3", "3", "", ""]], True),
        Fields(["a", "b", "c", "d"]),
        ("block", [["4", "4", "4", "", "", "y"]], True),
        End(),
    ]


def test_an_empty_feed_is_its_fields_and_the_end() -> None:
    assert list(frames(GrowingReader([]), chunk_rows=5)) == [Fields([]), End()]


@pytest.mark.parametrize("escape", [True, False])
def test_block_encoding_matches_escaping_value_by_value(escape: bool) -> None:
    values = ["tab\there", "back\\slash", "\\N", "new\nline", "cr\rlf\r\n", "", "é 日本 🔥", "end\\", "\x01\x7f"]
    reader = GrowingReader([(["v"], [v]) for v in values])
    blocks = [f for f in frames(reader, chunk_rows=100, escape=escape) if isinstance(f, Block)]
    assert len(blocks) == 1 and blocks[0].joined is not escape
    data = escape_block(blocks[0].data) if blocks[0].joined else blocks[0].data
    slow = _chunks._encode_slowly([(i, [v]) for i, v in enumerate(values, 1)], 1)
    assert data == slow


@pytest.mark.parametrize("value", ["a\x1eb", "a\ud800b"])
def test_a_record_separator_or_lone_surrogate_takes_the_careful_path(value: str) -> None:
    reader = GrowingReader([(["v"], ["x"]), (["v"], [value])])
    (block,) = [f for f in frames(reader, chunk_rows=100, escape=False) if isinstance(f, Block)]
    assert not block.joined
    expected = value.encode("utf-8", "replace")
    assert block.data == b"1\t1\tx\n2\t2\t" + expected + b"\n"


def test_a_csv_reader_spares_the_separator_check_only_until_its_text_shows_one(tmp_path: Path) -> None:
    path = tmp_path / "feed.csv"
    path.write_bytes(b"id,t\n1,a\n2,b\x1ec\n")
    reader = CsvReader(path, source="main", encoding="auto", delimiter="auto", fmt="csv")
    assert not reader.rs_seen
    rows = list(reader)
    assert rows[1] == (3, ["2", "b\x1ec"]) and reader.rs_seen


# -- the parser process ------------------------------------------------------------------------


@pytest.fixture()
def parsers(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes]]:
    """Force a parser process for any feed; the list collects the processes started."""
    return record_parser_children(monkeypatch, always=True)


def big_csv(tmp_path: Path, rows: int = 40_000) -> Path:
    """Several MB: more than the pipe holds, so the parser blocks on it if nobody reads."""
    path = tmp_path / "feed.csv"
    path.write_text("id,t\n" + "".join(f"{i},{'x' * 150}\n" for i in range(rows)), encoding="utf-8")
    return path


def test_a_parser_process_yields_the_same_frames_and_leaves_the_same_reader_state(
    tmp_path: Path, parsers: list[subprocess.Popen[bytes]]
) -> None:
    path = big_csv(tmp_path)
    local = open_reader(path, source="main", format="csv")
    expected = [decoded(f) for f in frames(local, chunk_rows=2000)]
    remote = open_reader(path, source="main", format="csv")
    with _child.copy_frames(remote, chunk_rows=2000) as stream:
        got = [decoded(f) for f in stream]
    assert len(parsers) == 1 and parsers[0].returncode is not None
    assert got == expected and len(got) == 40_000 // 500 + 2
    assert (remote.fields, remote.stats) == (local.fields, local.stats)


def test_leaving_early_kills_the_parser_and_closes_its_pipe(
    tmp_path: Path, parsers: list[subprocess.Popen[bytes]]
) -> None:
    reader = open_reader(big_csv(tmp_path), source="main", format="csv")
    with _child.copy_frames(reader, chunk_rows=2000) as stream:
        assert isinstance(next(stream), Fields) and isinstance(next(stream), Block)
        (proc,) = parsers
        assert proc.poll() is None  # still parsing, held back by the full pipe
    assert proc.returncode == -signal.SIGKILL and proc.stdout is not None and proc.stdout.closed


def test_an_error_raised_while_consuming_still_stops_the_parser(
    tmp_path: Path, parsers: list[subprocess.Popen[bytes]]
) -> None:
    reader = open_reader(big_csv(tmp_path), source="main", format="csv")
    with pytest.raises(KeyboardInterrupt), _child.copy_frames(reader, chunk_rows=2000) as stream:
        next(stream)
        raise KeyboardInterrupt
    assert parsers[0].returncode is not None


def test_a_parser_that_dies_is_an_error_not_a_short_feed(
    tmp_path: Path, parsers: list[subprocess.Popen[bytes]]
) -> None:
    reader = open_reader(big_csv(tmp_path), source="main", format="csv")
    with _child.copy_frames(reader, chunk_rows=2000) as stream:
        next(stream)
        parsers[0].kill()
        with pytest.raises(_child.ParserDied, match="stopped unexpectedly"):
            for _frame in stream:
                pass


def test_a_parse_error_in_the_parser_reaches_the_caller_as_itself(
    tmp_path: Path, parsers: list[subprocess.Popen[bytes]]
) -> None:
    path = tmp_path / "feed.csv"
    path.write_bytes(b"id,t\n" + b"1,ok\n" * 20_000 + b"2,\xff\n")
    reader = open_reader(path, source="main", format="csv", encoding="utf-8")
    with pytest.raises(ParseError) as caught, _child.copy_frames(reader, chunk_rows=2000) as stream:
        for _frame in stream:
            pass
    assert str(caught.value).startswith("source 'main': line 20002: not valid utf-8 text")
    assert caught.value.source == "main" and caught.value.code == "parse_error"
    assert reader.stats.rows == 0 and parsers[0].returncode is not None


def round_trip(exc: BaseException) -> BaseException:
    result = pickle.loads(pickle.dumps(_child._portable(exc)))
    assert isinstance(result, BaseException)
    return result


def test_errors_cross_the_process_boundary_with_their_class_message_and_attributes() -> None:
    parse = round_trip(ParseError("main", "line 3: broken"))
    assert type(parse) is ParseError and str(parse) == "source 'main': line 3: broken" and parse.source == "main"
    os_error = round_trip(FileNotFoundError(errno.ENOENT, "No such file", "feed.csv"))
    assert isinstance(os_error, FileNotFoundError) and os_error.errno == errno.ENOENT
    assert any("FileNotFoundError" in note for note in getattr(os_error, "__notes__", []))


def test_an_error_that_cannot_be_pickled_arrives_as_a_runtime_error_with_its_text() -> None:
    class Local(Exception):  # a local class cannot be pickled
        pass

    result = round_trip(Local("odd"))
    assert type(result) is RuntimeError and "Local: odd" in str(result)


def _stage_rows_in_a_daemon(path: str, results: Any) -> None:
    _child.PROCESS_MIN_BYTES = 0
    reader = open_reader(Path(path), source="main", format="csv")
    with _child.copy_frames(reader, chunk_rows=2000) as stream:
        results.put(sum(f.rows for f in stream if isinstance(f, Block)))


def test_a_daemonic_worker_process_can_start_a_parser(tmp_path: Path) -> None:
    # Celery's prefork children are daemonic: multiprocessing could not start children there, subprocess can.
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    worker = context.Process(target=_stage_rows_in_a_daemon, args=(str(big_csv(tmp_path, 5000)), results), daemon=True)
    worker.start()
    try:
        assert results.get(timeout=60) == 5000
    finally:
        worker.join(timeout=60)
        results.close()
        results.join_thread()
    assert worker.exitcode == 0
