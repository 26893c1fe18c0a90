"""The channel `<link>` read off the first item line (P32, 8.19): only top-level `g:link` elements count."""

from __future__ import annotations

import pytest

from firefeed.export.google_xml import first_link


def line(body: bytes) -> bytes:
    return b"<item>" + body + b"</item>\n<item><g:link>second</g:link></item>\n"


@pytest.mark.parametrize(
    ("body", "joined", "expected"),
    [
        (b"<g:id>1</g:id><g:link>a</g:link>", False, b"a"),
        (b"<g:shipping><g:link>sub</g:link></g:shipping><g:link>top</g:link>", False, b"top"),
        (b"<g:link>a</g:link><g:shipping><g:link>sub</g:link></g:shipping><g:link>b</g:link>", True, b"a,b"),
        (b"<g:shipping><g:link>sub</g:link><g:country>DE</g:country></g:shipping>", True, b""),
        (b"<g:id>1</g:id>", False, b""),
    ],
)
def test_only_top_level_links_of_the_first_line(body: bytes, joined: bool, expected: bytes) -> None:
    assert first_link(line(body), joined=joined) == expected


def test_a_long_list_link_is_read_in_one_sweep() -> None:
    """A tenant's list `link` may hold any number of elements: each span of the line is counted once
    (this took hours when every element recounted the line from its start)."""
    n = 200_000
    body = b"<g:shipping><g:link>s</g:link></g:shipping>" + b"<g:link>x</g:link>" * n
    got = first_link(line(body), joined=True)
    assert got == b",".join([b"x"] * n)
