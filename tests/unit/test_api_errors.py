"""The one HTTP mapping (api/errors.py): which status and body each error of the tree answers."""

from __future__ import annotations

import pytest

from firefeed.api.errors import error_body, status_of
from firefeed.errors import (
    FetchError,
    FireFeedError,
    InvalidSourceRequestError,
    ParseError,
    SpecError,
    UnsafePathError,
    UnsafeURLError,
)


@pytest.mark.parametrize(
    ("err", "status", "code"),
    [
        # The spec's mistake, found before any server failed: 422 with a code of its own.
        (UnsafeURLError("main", "redirects to a non-http URL"), 422, "unsafe_url"),
        (InvalidSourceRequestError("main", "header 'X' has a character not allowed"), 422, "invalid_source_request"),
        (UnsafePathError("outside the allowed folders", source="main"), 422, "unsafe_path"),
        (ParseError("main", "not CSV"), 422, "parse_error"),
        # An upstream server that failed (5xx, timeout, refused, too large): a bad gateway.
        (FetchError("main", "HTTP 503 from http://feeds.example.com/f.csv"), 502, "fetch_error"),
    ],
)
def test_source_errors_answer_the_status_of_whose_fault_they_are(err: FireFeedError, status: int, code: str) -> None:
    assert (status_of(err), error_body(err)["error"]) == (status, code)
    assert error_body(err)["source"] == "main"


def test_an_invalid_source_request_is_a_fetch_error_for_the_run_and_the_cli() -> None:
    # The CLI exits 1 for every FetchError, as for unsafe_url; a RunReport names its class.
    assert issubclass(InvalidSourceRequestError, FetchError)


def test_a_spec_error_about_the_whole_document_has_an_empty_path() -> None:
    assert error_body(SpecError("", "the spec is larger than 1048576 bytes"))["path"] == ""
