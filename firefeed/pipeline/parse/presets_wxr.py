"""A WordPress export (WXR) read for `preset: woocommerce`: each `<item>` as named fields.

The generic XML reader flattens an item by element names: a WXR's product meta
then lands in positional pairs (`postmeta_34.meta_key` / `meta_value`, at other
positions in every item) and its terms lose their taxonomy (`domain`), so a
product category cannot be told from a colour. This reader keeps the XML
reader's streaming, encoding and value cap, and only flattens an item
differently: each `wp:postmeta` pair becomes a field named by its meta key (the
first pair of a key wins: a variable product stores `_price` once per price),
and terms are grouped by taxonomy.
"""

from __future__ import annotations

from typing import Any

from firefeed.pipeline.parse._base import ValueTooLong
from firefeed.pipeline.parse._names import FieldIndex
from firefeed.pipeline.parse.xml_reader import XmlReader, local_name

#: WXR element (local name) -> the named field it fills
ELEMENTS = {
    "title": "title",
    "link": "link",
    "post_id": "id",
    "post_parent": "parent",
    "post_type": "post_type",
    "status": "status",
    "post_name": "post_name",
    "post_date": "post_date",
    "menu_order": "menu_order",
    "attachment_url": "attachment_url",
}
#: taxonomy (`<category domain=...>`) -> the named field its terms fill, joined with ", "
TAXONOMIES = {
    "product_cat": "categories",
    "product_tag": "tags",
    "product_type": "type",
    "product_visibility": "visibility",
    "product_brand": "brand",
    "pwb-brand": "brand",
    "yith_product_brand": "brand",
}


def _text(el: Any) -> str:
    # An element holding unexpanded entity references: the text around them (as the XML reader reads it).
    return (el.text or "") + "".join(c.tail or "" for c in el)


class WxrReader(XmlReader):
    """Items of a WXR: post fields, terms by taxonomy (`pa_*` attributes under their own name), meta by key."""

    def _into(self, el: Any, prefix: str, row: list[str], index: FieldIndex) -> list[str]:
        cap = self.max_value_chars
        fields: dict[str, str] = {}
        terms: dict[str, list[str]] = {}
        meta: dict[str, str] = {}
        for child in el:
            tag = child.tag
            if not isinstance(tag, str):
                continue
            name = local_name(tag)
            if name == "postmeta":
                key = value = ""
                for part in child:
                    if not isinstance(part.tag, str):
                        continue
                    part_name = local_name(part.tag)
                    if part_name == "meta_key":
                        key = _text(part).strip()
                    elif part_name == "meta_value":
                        value = _text(part)
                if key and key not in meta:
                    if len(value) > cap:
                        raise ValueTooLong(key)
                    meta[key] = value
                continue
            value = _text(child)
            if name == "category":
                domain = child.get("domain", "")
                field = TAXONOMIES.get(domain, domain if domain.startswith("pa_") else "")
                if field:
                    terms.setdefault(field, []).append(value.strip())
                continue
            if name == "encoded":
                field = "short_description" if "excerpt" in tag else "description"
            else:
                field = ELEMENTS.get(name, "")
            if not field or field in fields:
                continue
            if len(value) > cap:
                raise ValueTooLong(field)
            fields[field] = value
        for field, names in terms.items():
            joined = ", ".join(dict.fromkeys(n for n in names if n))
            if len(joined) > cap:
                raise ValueTooLong(field)
            fields[field] = joined
        for key, value in meta.items():
            fields.setdefault(key, value)
        if fields.get("parent", "").strip() == "0":
            fields["parent"] = ""
        position = index.position
        for field, value in fields.items():
            at = position.get(field)
            if at is None:
                at = index.add(field)
                if at >= len(row):
                    row.extend([""] * (at + 1 - len(row)))
            row[at] = value
        return row
