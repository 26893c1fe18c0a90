"""XML feeds (SPEC 2 "Items", 8.5): items, local names, nesting, and a parser that cannot be abused."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from firefeed.errors import ParseError
from firefeed.pipeline.parse import ParseStats, open_reader

FEEDS = Path(__file__).parent.parent / "fixtures" / "feeds"


def read(path: Path, **options: str) -> tuple[list[str], list[tuple[int, list[str]]], ParseStats]:
    reader = open_reader(path, source="main", format="xml", **options)
    rows = list(reader)
    return reader.fields, rows, reader.stats


def write(tmp_path: Path, data: str | bytes) -> Path:
    path = tmp_path / "feed.xml"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_rss_items_use_local_names_cdata_text_as_written_and_ignore_attributes() -> None:
    fields, rows, _ = read(FEEDS / "rss_g.xml")
    assert fields == ["id", "title", "price", "image_link", "sale_price", "brand"]
    assert rows == [
        (6, ["A1", "Fish & Chips <b>bold</b>", "  19.99 EUR ", "https://x/1.jpg", ""]),
        (13, ["A2", "Café & more", "5.00 EUR", "", "", "Acme"]),
    ]


def test_atom_entries_are_the_items() -> None:
    fields, rows, _ = read(FEEDS / "atom.xml")
    assert fields == ["id", "title", "price"]
    assert rows == [(4, ["E1", "First"]), (8, ["E2", "Second", "3 EUR"])]


def test_nested_children_flatten_with_dots_and_repeats_get_suffixes_in_document_order() -> None:
    fields, rows, _ = read(FEEDS / "nested.xml")
    assert fields == [
        "id",
        "shipping.country",
        "shipping.price",
        "shipping_2.country",
        "shipping_2.price",
        "image",
        "image_2",
        "image_3",
    ]
    assert rows == [
        (5, ["P1", "IT", "4.95", "DE", "6.95", "a.jpg", "b.jpg", "c.jpg"]),
        (13, ["P2", "", "", "", "", "d.jpg", "", ""]),
    ]


def test_the_shallowest_repeated_element_with_children_is_the_item(tmp_path: Path) -> None:
    doc = (
        "<export><header><src>a</src><src>b</src></header><products>"
        + "".join(f"<product><id>{i}</id><img>x</img><img>y</img></product>" for i in range(3))
        + "</products></export>"
    )
    fields, rows, _ = read(write(tmp_path, doc))
    # header/src repeats at the same depth, but has no children: not an item.
    assert fields == ["id", "img", "img_2"]
    assert [values for _, values in rows] == [["0", "x", "y"], ["1", "x", "y"], ["2", "x", "y"]]


def test_repeated_children_of_the_root_are_the_items(tmp_path: Path) -> None:
    doc = "<products><meta><v>1</v></meta>" + "".join(f"<p><id>{i}</id></p>" for i in range(3)) + "</products>"
    fields, rows, _ = read(write(tmp_path, doc))
    assert fields == ["id"]
    assert [values for _, values in rows] == [["0"], ["1"], ["2"]]


def test_a_single_item_without_repeats_is_still_an_item(tmp_path: Path) -> None:
    fields, rows, _ = read(write(tmp_path, "<products><product><id>1</id><t>x</t></product></products>"))
    assert (fields, rows) == (["id", "t"], [(1, ["1", "x"])])


@pytest.mark.parametrize("doc", ["", "  \n", "<products/>", "<rss><channel><title>t</title></channel></rss>"])
def test_a_feed_without_items_has_no_rows(tmp_path: Path, doc: str) -> None:
    assert read(write(tmp_path, doc))[:2] == ([], [])


@pytest.mark.parametrize(
    ("item_path", "ids"),
    [
        ("product", ["1", "2", "3"]),
        ("new/product", ["3"]),
        ("/catalog/old/product", ["1", "2"]),
        ("catalog/old/product", ["1", "2"]),
        ("missing", []),
    ],
)
def test_an_explicit_item_path_picks_elements_by_local_name_and_ancestors(
    tmp_path: Path, item_path: str, ids: list[str]
) -> None:
    doc = (
        '<catalog xmlns:x="urn:x"><old><product><id>1</id></product><x:product><id>2</id></x:product></old>'
        "<new><product><id>3</id></product></new></catalog>"
    )
    _, rows, _ = read(write(tmp_path, doc), item_path=item_path)
    assert [values[0] for _, values in rows] == ids


def test_an_item_nested_in_an_item_of_the_same_name_is_a_field(tmp_path: Path) -> None:
    doc = "<rss><channel><item><id>1</id><item><id>inner</id></item></item></channel></rss>"
    fields, rows, _ = read(write(tmp_path, doc))
    assert fields == ["id", "item.id"]
    assert rows == [(1, ["1", "inner"])]


def test_billion_laughs_is_refused_quickly_without_growing() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(ParseError, match="XML syntax error"):
        read(FEEDS / "billion_laughs.xml")
    assert time.monotonic() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB


def test_internal_entities_are_not_expanded() -> None:
    _fields, rows, _ = read(FEEDS / "small_entity.xml")
    assert rows == [(6, ["1", "ab"])]


def test_external_entities_read_no_file_and_no_network() -> None:
    fields, rows, _ = read(FEEDS / "xxe.xml")
    assert fields == ["id", "a", "b", "c"]
    assert rows == [(7, ["1", "[]", "", ""])]
    text = "".join(v for _, values in rows for v in values)
    assert "root:" not in text and "TOP-SECRET" not in text


@pytest.mark.parametrize(
    ("doc", "line"),
    [
        ("<rss>\n<channel>\n<item><a>1</b></item>\n</channel></rss>", 3),
        ("not xml at all", 1),
        ("<r><i><a>1</a></i>\n<i><a>2</a></i>\n", 3),
    ],
)
def test_a_syntax_error_names_its_line(tmp_path: Path, doc: str, line: int) -> None:
    with pytest.raises(ParseError, match=rf"source 'main': line {line}: XML syntax error"):
        read(write(tmp_path, doc))


def test_nul_bytes_are_removed_and_counted(tmp_path: Path) -> None:
    _fields, rows, stats = read(write(tmp_path, b"<r><i><t>a\x00b</t></i><i><t>\x00</t></i></r>"))
    assert rows == [(1, ["ab"]), (1, [""])]
    assert stats.nul_removed == 2


def test_comments_and_processing_instructions_are_not_text(tmp_path: Path) -> None:
    doc = "<r><i><t>a<!-- note -->b<?pi x?>c</t><!-- c --></i><i><t>x</t></i></r>"
    assert read(write(tmp_path, doc))[1] == [(1, ["abc"]), (1, ["x"])]


def test_line_numbers_beyond_65535_are_exact(tmp_path: Path) -> None:
    doc = "<r>\n" + "<i><t>x</t></i>\n" * 70_000 + "</r>"
    _, rows, _ = read(write(tmp_path, doc))
    assert rows[-1][0] == 70_001
