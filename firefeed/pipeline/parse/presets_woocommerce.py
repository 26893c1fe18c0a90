"""`preset: woocommerce`: a WooCommerce export (WXR xml, or the product CSV) as one item per product or
variation (docs/presets.md).

Both shapes are first read into the same named fields (`_wxr` for the xml;
`csv_row` for the CSV, English or Portuguese headers), then turned into items
the same way. A variation names its parent anywhere in the file, so the file is
read twice: the first pass counts each parent's variations (and, in a WXR,
notes the attachments' URLs, which come after the products); the second keeps
the inherited fields of exactly the products that are parents, within a
budget of characters, and yields the items.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from firefeed.pipeline.parse._base import EncodingRestart, FeedReader
from firefeed.pipeline.parse.presets import Item, Notes, number
from firefeed.pipeline.parse.presets_wxr import WxrReader

#: what a variation takes from its parent where its own value is empty
INHERITED = (
    "title",
    "description",
    "short_description",
    "link",
    "categories",
    "tags",
    "brand",
    "_weight",
    "_length",
    "_width",
    "_height",
    "_tax_status",
    "_tax_class",
)
#: the fields the preset names, first in every item (docs/presets.md)
NAMED = (
    "id",
    "type",
    "parent_id",
    "item_group_id",
    "variations",
    "title",
    "description",
    "short_description",
    "link",
    "categories",
    "tags",
    "brand",
    "price",
    "sale_price",
    "availability",
    "gtin",
    "image_link",
    "additional_image_link",
    "images",
    "color",
    "size",
    "material",
    "pattern",
    "status",
)
#: the most characters of parents' inherited fields kept at once; past it the oldest parents are let go
PARENT_BUDGET_CHARS = 32_000_000
#: an attribute name (lowercase, `pa_` dropped) -> the Google variant attribute its value goes to
VARIANT_ATTRIBUTES = {
    "color": "color",
    "colour": "color",
    "cor": "color",
    "size": "size",
    "tamanho": "size",
    "material": "material",
    "pattern": "pattern",
    "padrao": "pattern",
    "padrão": "pattern",
    "estampa": "pattern",
}
_AVAILABILITY = {"instock": "in_stock", "outofstock": "out_of_stock", "onbackorder": "backorder"}
_FLAGS = ("virtual", "downloadable")

# -- the CSV's columns ----------------------------------------------------------------------------------

#: a header (lowercase, trimmed) -> the named field it fills; English and Portuguese (Brazil) exports
CSV_COLUMNS = {
    "id": "id",
    "type": "type",
    "tipo": "type",
    "sku": "_sku",
    "ref": "_sku",
    "gtin, upc, ean, or isbn": "_global_unique_id",
    "gtin, upc, ean ou isbn": "_global_unique_id",
    "name": "title",
    "nome": "title",
    "published": "status",
    "publicado": "status",
    "short description": "short_description",
    "descrição curta": "short_description",
    "description": "description",
    "descrição": "description",
    "date sale price starts": "_sale_price_dates_from",
    "data de preço promocional começa em": "_sale_price_dates_from",
    "date sale price ends": "_sale_price_dates_to",
    "data de preço promocional termina em": "_sale_price_dates_to",
    "tax status": "_tax_status",
    "status da taxa": "_tax_status",
    "tax class": "_tax_class",
    "classe de taxa": "_tax_class",
    "in stock?": "_stock_status",
    "em estoque?": "_stock_status",
    "stock": "_stock",
    "estoque": "_stock",
    "backorders allowed?": "_backorders",
    "são permitidas encomendas?": "_backorders",
    "sale price": "_sale_price",
    "preço promocional": "_sale_price",
    "regular price": "_regular_price",
    "preço": "_regular_price",
    "categories": "categories",
    "categorias": "categories",
    "tags": "tags",
    "images": "images",
    "imagens": "images",
    "parent": "parent",
    "produto ascendente": "parent",
    "external url": "_product_url",
    "url externa": "_product_url",
    "brands": "brand",
    "marcas": "brand",
}
#: headers with a unit in brackets: "Weight (kg)", "Peso (kg)"
_UNIT_COLUMNS = {
    "weight": "_weight",
    "peso": "_weight",
    "length": "_length",
    "comprimento": "_length",
    "width": "_width",
    "largura": "_width",
    "height": "_height",
    "altura": "_height",
}
_META = re.compile(r"^(meta|metadado):\s*(.+)$", re.IGNORECASE)
_ATTRIBUTE = re.compile(
    r"^(?:attribute (\d+) (name|value\(s\)|global)|(nome) do atributo (\d+)|(valores) do atributo (\d+)"
    r"|atributo (global) (\d+))$"
)
_PUBLISHED = {"1": "publish", "0": "private", "-1": "draft"}
_IN_STOCK = {"1": "instock", "0": "outofstock", "backorder": "onbackorder"}
_BACKORDERS = {"1": "yes", "0": "no", "notify": "notify"}


def _column_name(header: str) -> tuple[str, tuple[str, int] | None]:
    """The named field a CSV header fills (the header itself if none), and (part, n) for an attribute's."""
    low = header.strip().lower()
    if low in CSV_COLUMNS:
        return CSV_COLUMNS[low], None
    unit = low.split(" (", 1)[0]
    if unit in _UNIT_COLUMNS and low.endswith(")"):
        return _UNIT_COLUMNS[unit], None
    meta = _META.match(header.strip())
    if meta:
        return meta.group(2).strip(), None
    attribute = _ATTRIBUTE.match(low)
    if attribute:
        g = attribute.groups()
        if g[0]:
            part, n = {"name": "name", "value(s)": "values", "global": "global"}[g[1]], int(g[0])
        elif g[2]:
            part, n = "name", int(g[3])
        elif g[4]:
            part, n = "values", int(g[5])
        else:
            part, n = "global", int(g[7])
        return header, (part, n)
    return header, None


def _slug(text: str) -> str:
    return re.sub(r"[^\w]+", "-", text.strip().lower()).strip("-")


def csv_rows(reader: FeedReader) -> Iterator[tuple[int, dict[str, str]]]:
    """The CSV's rows as named fields (`CSV_COLUMNS`, `Meta: x` as `x`, attributes as `attribute_<slug>`)."""
    names: list[str] | None = None
    attributes: dict[int, dict[str, int]] = {}
    for line, values in reader:
        if names is None:
            names = []
            for i, header in enumerate(reader.fields):
                name, attribute = _column_name(header)
                names.append(name)
                if attribute is not None:
                    attributes.setdefault(attribute[1], {})[attribute[0]] = i
        row: dict[str, str] = {}
        for name, value in zip(names, values, strict=False):
            if name not in row or not row[name]:
                row[name] = value
        kind = [t.strip().lower() for t in row.get("type", "").split(",") if t.strip()]
        for flag in _FLAGS:
            row[f"_{flag}"] = "yes" if flag in kind else "no"
        row["type"] = next((t for t in kind if t not in _FLAGS), "")
        row["status"] = _PUBLISHED.get(row.get("status", "").strip(), row.get("status", ""))
        stock = row.get("_stock_status", "").strip().lower()
        row["_stock_status"] = _IN_STOCK.get(stock, stock)
        backorders = row.get("_backorders", "").strip().lower()
        row["_backorders"] = _BACKORDERS.get(backorders, backorders)
        for parts in attributes.values():
            name = values[parts["name"]].strip() if "name" in parts and parts["name"] < len(values) else ""
            if not name:
                continue
            at = parts.get("values")
            value = values[at] if at is not None and at < len(values) else ""
            is_global = "global" in parts and parts["global"] < len(values) and values[parts["global"]].strip() == "1"
            row[f"attribute_{'pa_' if is_global else ''}{_slug(name)}"] = value.replace("\\,", ",")
        row["_kind"] = "product_variation" if row["type"] == "variation" else "product"
        yield line, row


def wxr_rows(reader: FeedReader) -> Iterator[tuple[int, dict[str, str]]]:
    """A WXR's items as named fields (`WxrReader` pivots them); `_kind` is the post type."""
    for line, values in reader:
        row = dict(zip(reader.fields, values, strict=False))
        kind = row.get("post_type", "")
        row["_kind"] = kind
        if kind == "product_variation":
            row["type"] = "variation"
        yield line, row


# -- two passes -------------------------------------------------------------------------------------------


def _ref(text: str) -> str | None:
    """A parent reference as the census counts it: `id:65`, or `sku:<sku>`."""
    t = text.strip()
    if not t or t == "0":
        return None
    if t.lower().startswith("id:"):
        return "id:" + t[3:].strip()
    return "sku:" + t


class _Census:
    """What the first pass learns: each parent reference's variations, and attachment URLs by id."""

    def __init__(self) -> None:
        self.variations: dict[str, int] = {}
        self.attachments: dict[str, str] = {}


def _census(rows: Iterator[tuple[int, dict[str, str]]], wxr: bool) -> _Census:
    census = _Census()
    for _, row in rows:
        kind = row["_kind"]
        if kind == "product_variation":
            ref = _ref(("id:" if wxr else "") + row.get("parent", "")) if row.get("parent", "").strip() else None
            if ref is not None:
                census.variations[ref] = census.variations.get(ref, 0) + 1
        elif kind == "attachment" and row.get("attachment_url", "").strip():
            census.attachments[row.get("id", "").strip()] = row["attachment_url"].strip()
    return census


def items(reader: FeedReader, notes: Notes) -> Iterator[tuple[int, Item]]:
    """The products and variations, in file order."""
    wxr = isinstance(reader, WxrReader)
    read = wxr_rows if wxr else csv_rows
    while True:
        try:
            census = _census(read(reader), wxr)
            break
        except EncodingRestart:
            continue  # the reader switched encodings: count again from the start
    parents = _Parents()
    for line, row in read(reader):
        kind = row["_kind"]
        if kind == "product":
            yield line, _product(row, census, parents, wxr)
        elif kind == "product_variation":
            yield line, _variation(row, census, parents, wxr, notes)
        elif kind == "attachment":
            continue  # its URL is in the census, for the products' images
        else:
            notes.note(f"{kind or 'untyped'} posts skipped (not products)")
    if parents.dropped:
        notes.note(f"{parents.dropped} parents let go past the memory budget")


class _Parents:
    """The inherited fields of the parents read so far, within PARENT_BUDGET_CHARS, oldest let go first."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[str, dict[str, Any]]] = {}
        self.chars = 0
        self.dropped = 0

    def keep(self, refs: list[str], parent_id: str, fields: dict[str, Any]) -> None:
        size = sum(len(v) if isinstance(v, str) else sum(map(len, v)) for v in fields.values())
        for ref in refs:
            self.kept[ref] = (parent_id, fields)
        self.chars += size * len(refs)
        while self.chars > PARENT_BUDGET_CHARS and self.kept:
            oldest = next(iter(self.kept))
            _, old = self.kept.pop(oldest)
            self.chars -= sum(len(v) if isinstance(v, str) else sum(map(len, v)) for v in old.values())
            self.dropped += 1

    def get(self, ref: str) -> tuple[str, dict[str, Any]] | None:
        return self.kept.get(ref)


def _images(row: dict[str, str], census: _Census, wxr: bool) -> list[str]:
    if not wxr:
        return list(dict.fromkeys(u.strip() for u in row.get("images", "").split(",") if u.strip()))
    ids = [row.get("_thumbnail_id", "").strip(), *row.get("_product_image_gallery", "").split(",")]
    urls = [census.attachments.get(i.strip(), "") for i in ids if i.strip()]
    return list(dict.fromkeys(u for u in urls if u))


def _prices(row: dict[str, str]) -> tuple[str, str]:
    """(price, sale_price): the regular price, and the sale price when it is lower."""
    regular = row.get("_regular_price", "").strip()
    sale = row.get("_sale_price", "").strip()
    r, s = number(regular), number(sale)
    if r is not None and s is not None and s < r:
        return regular, sale
    if regular:
        return regular, ""
    return (sale or row.get("_price", "").strip()), ""


def _availability(row: dict[str, str]) -> str:
    status = row.get("_stock_status", "").strip().lower()
    return _AVAILABILITY.get(status, status)


def _variant_attributes(row: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in row.items():
        if not name.startswith("attribute_") or not value.strip() or "," in value:
            continue  # a list of values (a parent's) is no variant attribute
        attribute = VARIANT_ATTRIBUTES.get(name[len("attribute_") :].removeprefix("pa_").lower())
        if attribute is not None and attribute not in out:
            out[attribute] = value.strip()
    return out


def _item(row: dict[str, str], images: list[str]) -> Item:
    item: Item = dict.fromkeys(NAMED, "")
    price, sale_price = _prices(row)
    item.update(
        id=row.get("id", "").strip(),
        type=row.get("type", ""),
        title=row.get("title", ""),
        description=row.get("description", ""),
        short_description=row.get("short_description", ""),
        link=row.get("link", ""),
        categories=row.get("categories", ""),
        tags=row.get("tags", ""),
        brand=row.get("brand", ""),
        price=price,
        sale_price=sale_price,
        availability=_availability(row),
        gtin=row.get("_global_unique_id", "").strip(),
        image_link=images[0] if images else "",
        additional_image_link=images[1:],
        images=images,
        status=row.get("status", ""),
        **_variant_attributes(row),
    )
    for name, value in row.items():
        if name not in item and name not in ("_kind", "parent"):
            item[name] = value
    return item


def _product(row: dict[str, str], census: _Census, parents: _Parents, wxr: bool) -> Item:
    images = _images(row, census, wxr)
    item = _item(row, images)
    refs = [r for r in (_ref("id:" + item["id"]), _ref(row.get("_sku", ""))) if r is not None]
    count = sum(census.variations.get(r, 0) for r in refs)
    item["variations"] = str(count)
    if count:
        kept = {name: item[name] for name in INHERITED if item.get(name)}
        kept["images"] = images
        parents.keep([r for r in refs if r in census.variations], item["id"], kept)
    return item


def _variation(row: dict[str, str], census: _Census, parents: _Parents, wxr: bool, notes: Notes) -> Item:
    own = row.get("description", "") or row.get("_variation_description", "")
    row = {**row, "description": own}
    images = _images(row, census, wxr)
    raw = row.get("parent", "").strip()
    ref = _ref(("id:" if wxr else "") + raw) if raw and raw != "0" else None
    parent = parents.get(ref) if ref is not None else None
    if parent is None:
        notes.note("variations whose parent is not before them in the file keep their own fields only")
        group = ref.split(":", 1)[1] if ref is not None else ""
        item = _item(row, images)
    else:
        group, inherited = parent
        item = _item(row, list(dict.fromkeys([*images, *inherited["images"]])))
        for name in INHERITED:
            mine = str(item.get(name, "")).strip()
            if (not mine or (name == "_tax_class" and mine == "parent")) and name in inherited:
                item[name] = inherited[name]
    item["parent_id"] = group
    item["item_group_id"] = group
    item["variations"] = "0"
    return item
