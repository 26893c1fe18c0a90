"""`preset: shopify`: a Shopify product export CSV as one item per variant (docs/presets.md).

Shopify writes a product as consecutive rows sharing its Handle: the first row
holds the product's fields and its first variant, later rows a variant each
(product columns left empty) or only an image. One Handle's rows are held,
then its items are yielded: memory is one product's rows whatever the file.
"""

from __future__ import annotations

from collections.abc import Iterator

from firefeed.errors import ParseError
from firefeed.pipeline.parse._base import FeedReader
from firefeed.pipeline.parse.presets import Item, Notes, number

HANDLE = "Handle"
OPTION_VALUES = ("Option1 Value", "Option2 Value", "Option3 Value")
OPTION_NAMES = ("Option1 Name", "Option2 Name", "Option3 Name")
#: columns whose value belongs to one row (a variant or an image), never taken from the product row
_OWN = frozenset({HANDLE, *OPTION_VALUES, "Image Src", "Image Position", "Image Alt Text"})
_OWN_PREFIXES = ("Variant ", "Cost per item", "Price / ", "Compare At Price / ", "Included / ")
#: a row holding one of these is a variant; a row with none of them (but an image) is an image row
_VARIANT_MARKS = ("Option1 Value", "Variant SKU", "Variant Price", "Variant Barcode")
#: an option name (lowercase) -> the Google variant attribute the option's value goes to
VARIANT_ATTRIBUTES = {
    "color": "color",
    "colour": "color",
    "size": "size",
    "material": "material",
    "pattern": "pattern",
}
#: the fields the preset names, first in every item (docs/presets.md)
NAMED = (
    "id",
    "item_group_id",
    "title",
    "variant_title",
    "price",
    "sale_price",
    "availability",
    "image_link",
    "additional_image_link",
    "images",
    "color",
    "size",
    "material",
    "pattern",
)


def inherited(column: str) -> bool:
    """Whether a variant row takes the product row's value of `column` where its own is empty."""
    return column not in _OWN and not column.startswith(_OWN_PREFIXES)


def items(reader: FeedReader, notes: Notes) -> Iterator[tuple[int, Item]]:
    """The variants of each Handle, in file order."""
    group: list[tuple[int, dict[str, str]]] = []
    handle = ""
    columns: list[str] | None = None
    for line, values in reader:
        if columns is None:
            columns = list(reader.fields)
            if HANDLE not in columns:
                raise ParseError(
                    getattr(reader, "source", "?"),
                    "preset shopify: the file has no Handle column; is it a Shopify product export?",
                )
        row = dict(zip(columns, values, strict=False))
        name = row.get(HANDLE, "").strip()
        if not name:
            notes.note("rows without a Handle skipped")
            continue
        if name != handle and group:
            yield from _group_items(group, columns, notes)
            group = []
        handle = name
        group.append((line, row))
    if group and columns is not None:
        yield from _group_items(group, columns, notes)


def _is_variant(row: dict[str, str]) -> bool:
    return any(row.get(c, "").strip() for c in _VARIANT_MARKS)


def _position(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        return float("inf")  # no position: after the numbered ones, in file order


def _images(group: list[tuple[int, dict[str, str]]]) -> list[str]:
    """The product's images: the product row's own first, then by Image Position (file order on ties)."""
    first = group[0][1].get("Image Src", "").strip()
    others = sorted(
        (
            (_position(row.get("Image Position", "")), n, row.get("Image Src", "").strip())
            for n, (_, row) in enumerate(group[1:])
        ),
    )
    ordered = [first] if first else []
    ordered.extend(src for _, _, src in others if src)
    return list(dict.fromkeys(ordered))


def _prices(row: dict[str, str]) -> tuple[str, str]:
    """(price, sale_price): a compare-at price above the price makes the price a sale (Google's reading)."""
    price = row.get("Variant Price", "").strip()
    compare = row.get("Variant Compare At Price", "").strip()
    p, c = number(price), number(compare)
    if p is not None and c is not None and c > p:
        return compare, price
    return price, ""


def _availability(row: dict[str, str]) -> str:
    """in_stock unless Shopify tracks the variant's stock, has none, and does not sell beyond it."""
    if not row.get("Variant Inventory Tracker", "").strip():
        return "in_stock"
    qty = number(row.get("Variant Inventory Qty", ""))
    if qty is not None and qty > 0:
        return "in_stock"
    if row.get("Variant Inventory Policy", "").strip().lower() == "continue":
        return "in_stock"
    return "out_of_stock"


def _options(parent: dict[str, str], row: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The variant's option values (not Shopify's "Default Title") and the Google attributes they give."""
    values: list[str] = []
    attributes: dict[str, str] = {}
    for name_col, value_col in zip(OPTION_NAMES, OPTION_VALUES, strict=True):
        value = row.get(value_col, "").strip()
        if not value or value == "Default Title":
            continue
        values.append(value)
        option = (row.get(name_col, "").strip() or parent.get(name_col, "").strip()).lower()
        attribute = VARIANT_ATTRIBUTES.get(option)
        if attribute is not None and attribute not in attributes:
            attributes[attribute] = value
    return values, attributes


def _group_items(
    group: list[tuple[int, dict[str, str]]], columns: list[str], notes: Notes
) -> Iterator[tuple[int, Item]]:
    parent = group[0][1]
    handle = parent[HANDLE].strip()
    variants = [(line, row) for line, row in group if _is_variant(row)]
    if not variants:
        # A Handle without a variant: the product row alone is the item (the channel flags what it lacks).
        notes.note("products without a variant row yielded as one item")
        variants = [group[0]]
    images = _images(group)
    keys: set[str] = set()
    for line, row in variants:
        item: Item = dict.fromkeys(NAMED, "")
        options, attributes = _options(parent, row)
        sku = row.get("Variant SKU", "").strip()
        key = f"{handle}:{sku}" if sku else (f"{handle}:{' / '.join(options)}" if options else handle)
        if key in keys:
            # The same SKU (or options) twice in one product: both stay items, the later one numbered.
            notes.note("variants with a repeated SKU or options keyed with #n")
            n = 2
            while f"{key}#{n}" in keys:
                n += 1
            key = f"{key}#{n}"
        keys.add(key)
        own = row.get("Variant Image", "").strip()
        mine = list(dict.fromkeys([own, *images])) if own else images
        price, sale_price = _prices(row)
        title = row.get("Title", "").strip() or parent.get("Title", "").strip()
        variant_title = " / ".join(options)
        item.update(
            id=key,
            item_group_id=handle,
            title=f"{title} - {variant_title}" if title and variant_title else title,
            variant_title=variant_title,
            price=price,
            sale_price=sale_price,
            availability=_availability(row),
            image_link=mine[0] if mine else "",
            additional_image_link=mine[1:],
            images=mine,
            **attributes,
        )
        for column in columns:
            value = row.get(column, "")
            if not value and inherited(column):
                value = parent.get(column, "")
            if column not in item:
                item[column] = value
        yield line, item
