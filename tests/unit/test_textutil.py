import sys

from firefeed.textutil import WHITESPACE


def test_whitespace_is_exactly_what_python_calls_white_space() -> None:
    expected = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
    assert expected == WHITESPACE
