"""List fields as the readers stage them (SPEC 9, P3-P5): Postgres array literals, `{}` for no elements, or,
for a csv/tsv list with a one-character separator, the elements joined by it, "" for none."""

from __future__ import annotations

from pathlib import Path

import pytest

from firefeed.pipeline.parse import open_reader


def rows(path: Path, fmt: str, lists: dict[str, str]) -> list[dict[str, str]]:
    reader = open_reader(path, source="main", format=fmt, lists=lists)
    got = [values for _line, values in reader]
    return [dict(zip(reader.fields, values, strict=False)) for values in got]


def test_csv_cells_split_on_the_separator_trimmed_without_empty_elements(tmp_path: Path) -> None:
    path = tmp_path / "feed.csv"
    path.write_text(
        'id,images,tags,sizes\n1,"a.jpg, b.jpg,,\u00a0c.jpg ",x|y,S; M\n2,,|, ; \n3,"q""uo\\te",one,L\n',
        encoding="utf-8",
    )
    got = rows(path, "csv", {"images": ",", "tags": "|", "sizes": "; "})
    # one-character separators: staged delimited (the trimmed, non-empty elements joined by it)
    assert [r["images"] for r in got] == ["a.jpg,b.jpg,c.jpg", "", 'q"uo\\te']
    assert [r["tags"] for r in got] == ["x|y", "", "one"]
    # a longer one: an array literal
    assert [r["sizes"] for r in got] == ['{"S","M"}', "{}", '{"L"}']


def test_a_separator_is_taken_literally(tmp_path: Path) -> None:
    path = tmp_path / "feed.tsv"
    path.write_text("id\tsizes\n1\tS.*M.*L\n", encoding="utf-8")
    assert rows(path, "tsv", {"sizes": ".*"})[0]["sizes"] == '{"S","M","L"}'


def test_json_arrays_of_scalars_are_lists_and_others_stay_text(tmp_path: Path) -> None:
    path = tmp_path / "feed.json"
    path.write_text(
        '[{"id": 1, "images": ["a", 1.50, true, null, " "], "nested": [{"x": 1}], "one": "a,b", "none": [],'
        ' "ship": {"tags": ["p", "q"]}, "other": ["not", "a list"]}]',
        encoding="utf-8",
    )
    (item,) = rows(path, "json", {"images": ",", "nested": ",", "one": ",", "none": ",", "ship.tags": ","})
    assert item["images"] == '{"a","1.50","true"}'
    assert item["nested"] == '[0:0]={"[{\\"x\\":1}]"}'  # a text (P4): an array from 0
    assert item["one"] == '{"a,b"}'  # a scalar is one element, never split (P4)
    assert item["none"] == "{}"
    assert item["ship.tags"] == '{"p","q"}'
    assert item["other"] == '["not","a list"]'  # not a list field: compact JSON text, as before


def test_xml_repeated_elements_are_one_list_in_document_order(tmp_path: Path) -> None:
    path = tmp_path / "feed.xml"
    path.write_text(
        "<rss><channel><item><id>1</id><image> a.jpg </image><title>T</title><image>b.jpg</image>"
        "<image><url>x</url></image><image><url>y</url></image><image/>"
        "<images><image>n1</image><image>n2</image></images></item></channel></rss>",
        encoding="utf-8",
    )
    (item,) = rows(path, "xml", {"image": ",", "images.image": ","})
    assert item["image"] == '{"a.jpg","b.jpg"}'
    assert item["image.url"] == "x" and item["image_2.url"] == "y"  # with children: flattened, numbered (P5)
    assert item["images.image"] == '{"n1","n2"}'


FIRST_SEEN_FEEDS = {
    "xml": "<items><item><id>1</id><title>T</title><img>a</img><img>b</img><color>red</color></item>"
    "<item><id>2</id><title>U</title><color>blue</color></item></items>",
    "json": '[{"id": 1, "title": "T", "img": ["a", "b"], "color": "red"}, {"id": 2, "title": "U", "color": "blue"}]',
    "csv": 'id,title,img,color\n1,T,"a,b",red\n2,U,,blue\n',
}


@pytest.mark.parametrize("fmt", sorted(FIRST_SEEN_FEEDS))
def test_a_list_field_takes_its_place_at_its_first_element_in_every_format(tmp_path: Path, fmt: str) -> None:
    # SPEC 8.18: first-seen order; a list is seen at its first element, wherever the format writes it.
    path = tmp_path / f"feed.{fmt}"
    path.write_text(FIRST_SEEN_FEEDS[fmt], encoding="utf-8")
    reader = open_reader(path, source="main", format=fmt, lists={"img": ","})
    got = [dict(zip(reader.fields, values, strict=False)) for _line, values in reader]
    assert reader.fields == ["id", "title", "img", "color"]
    # An empty csv cell is the empty list (delimited: ""); an item of xml or json without the field has ""
    # (staged as `{}`).
    first = "a,b" if fmt == "csv" else '{"a","b"}'
    assert [(r["img"], r["color"]) for r in got] == [(first, "red"), ("", "blue")]


def test_an_xml_list_first_seen_in_a_later_item_comes_after_the_fields_seen_before_it(tmp_path: Path) -> None:
    path = tmp_path / "feed.xml"
    path.write_text(
        "<items><item><id>1</id><color>red</color></item>"
        "<item><id>2</id><img>a</img><size>M</size><img>b</img><color>blue</color></item></items>",
        encoding="utf-8",
    )
    reader = open_reader(path, source="main", format="xml", lists={"img": ","})
    got = [values for _line, values in reader]
    assert reader.fields == ["id", "color", "img", "size"]
    assert dict(zip(reader.fields, got[1], strict=True)) == {
        "id": "2",
        "color": "blue",
        "img": '{"a","b"}',
        "size": "M",
    }


def test_a_nested_xml_list_takes_its_place_among_its_siblings(tmp_path: Path) -> None:
    path = tmp_path / "feed.xml"
    path.write_text(
        "<items><item><id>1</id><media><img>a</img><alt>x</alt><img>b</img></media><title>T</title></item>"
        "<item><id>2</id></item></items>",
        encoding="utf-8",
    )
    reader = open_reader(path, source="main", format="xml", lists={"media.img": ","})
    first, _second = (values for _line, values in reader)
    assert first == ["1", '{"a","b"}', "x", "T"]
    assert reader.fields == ["id", "media.img", "media.alt", "title"]


@pytest.mark.parametrize("child", [False, True])
def test_lists_survive_the_parser_child_process(tmp_path: Path, child: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from firefeed.pipeline.parse import _child

    path = tmp_path / "feed.csv"
    path.write_text("id,images\n" + "".join(f"{i},a{i}|b{i}\n" for i in range(50)), encoding="utf-8")
    monkeypatch.setattr(_child, "_worth_a_process", lambda reader: child)
    reader = open_reader(path, source="main", format="csv", lists={"images": "|", "other": "||"})
    with _child.copy_frames(reader, 1000) as got:
        data = b"".join(f.data for f in got if hasattr(f, "data"))
    assert b"\ta49|b49\n" in data  # staged delimited, by the child's reader as by this one's
    assert reader.delimited == {"images": "|"}


@pytest.mark.parametrize("fmt", ["xml", "json"])
def test_a_list_field_an_item_lacks_is_staged_as_the_empty_list(tmp_path: Path, fmt: str) -> None:
    """The staging column of a list field is text[], which takes no "": the frames COPY reads hold `{}` for
    an item without the field."""
    from firefeed.pipeline.parse._chunks import frames

    feeds = {
        "xml": "<items><item><id>1</id><color>red</color></item><item><id>2</id><img>a</img></item>"
        "<item><id>3</id><color>blue</color></item></items>",
        "json": '[{"id": 1, "color": "red"}, {"id": 2, "img": ["a"]}, {"id": 3, "color": "blue"}]',
    }
    path = tmp_path / f"feed.{fmt}"
    path.write_text(feeds[fmt], encoding="utf-8")
    reader = open_reader(path, source="main", format=fmt, lists={"img": ","})
    data = b"".join(f.data for f in frames(reader, 1000) if hasattr(f, "data"))
    lines = [line.split(b"\t") for line in data.splitlines()]
    at = reader.fields.index("img") + 2  # after _ff_ord and _ff_line
    # Item 1 came before the field was seen: its COPY has no such column (the column's default, `{}`, fills it).
    assert [line[at] if at < len(line) else None for line in lines] == [None, b'{"a"}', b"{}"]


def test_the_blocks_framed_for_the_copy_stage_lists_as_reading_row_by_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's framing stages a block's list cells at once (CsvReader.block_rows); any other reader of the rows
    stages them one by one. Blocks of clean cells, of dirty ones and of both must give the same values."""
    from firefeed.pipeline.parse import _chunks

    monkeypatch.setattr(_chunks, "BLOCK_ROWS", 3)
    images = ["a,b", "c", "d,e", " a , b", "", "a,,b", "x", "p,q", "r,s", ",y", "t", "z,", "u", "v"]
    path = tmp_path / "feed.csv"
    lines = [f'{n},"{cell}",s{n} | m{n}' for n, cell in enumerate(images)]
    path.write_text("id,images,sizes\n" + "\n".join(lines) + "\n15\n", encoding="utf-8")  # the last row short
    lists = {"images": ",", "sizes": " | "}

    reader = open_reader(path, source="main", format="csv", lists=lists)
    data = b"".join(f.data for f in _chunks.frames(reader, 1000) if isinstance(f, _chunks.Block))
    framed = [line.decode().split("\t")[2:] for line in data.splitlines()]  # after _ff_ord and _ff_line

    want = rows(path, "csv", lists)
    assert [dict(zip(reader.fields, values, strict=True)) for values in framed] == want
    assert [r["images"] for r in want][:7] == ["a,b", "c", "d,e", "a,b", "", "a,b", "x"]
