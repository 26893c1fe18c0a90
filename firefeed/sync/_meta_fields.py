"""How an export's items become a Meta catalog's product items and back (firefeed/sync/meta_catalog.py).

Sending: the export's columns carry Google's feed attribute names, which Meta's catalog fields mostly share;
`FIELDS` names the ones sent, every other column is left out (Meta refuses an item for a field it does not
know, and Google-only attributes such as identifier_exists, tax or shipping_label mean nothing there). A few
values are respelled the way Meta takes them: availability in words ("in stock", "available for order" for
Google's backorder), a price with a dot and two decimals ("12,5 eur" -> "12.50 EUR"), a list where Meta takes
one value joined by commas (product_type takes its first path). An empty value is sent as "", which is how an
UPDATE unsets a field.

Reading back: the products edge answers in the Graph's ProductItem names (name, url, image_url, a price
formatted for display with its currency apart); `remote_item` maps them to the export's columns in the same
spellings, so `comparable(export item)` and a listed product compare equal when nothing changed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from firefeed.sync.channel import Issue, RemoteItem

#: Export column (Google's feed attribute names, which Meta's catalog fields mostly share) -> items_batch field.
#: A column not named here is not sent (Meta would refuse the batch's item for an unknown field); Google-only
#: attributes (identifier_exists, tax, shipping_label, adult, multipack, ...) are among them.
FIELDS: dict[str, str] = {
    name: name
    for name in (
        "id",
        "title",
        "description",
        "rich_text_description",
        "short_description",
        "availability",
        "condition",
        "price",
        "sale_price",
        "sale_price_effective_date",
        "link",
        "mobile_link",
        "image_link",
        "additional_image_link",
        "video",
        "brand",
        "gtin",
        "mpn",
        "item_group_id",
        "color",
        "size",
        "gender",
        "age_group",
        "material",
        "pattern",
        "google_product_category",
        "fb_product_category",
        "product_type",
        "shipping",
        "shipping_weight",
        "quantity_to_sell_on_facebook",
        "inventory",
        "status",
        "visibility",
        "origin_country",
        "expiration_date",
        "internal_label",
        *(f"custom_label_{i}" for i in range(5)),
        *(f"custom_number_{i}" for i in range(5)),
    )
}
#: ProductItem field (what the products edge answers) -> export column; price and sale_price are read apart.
READ_FIELDS: dict[str, str] = {
    "retailer_id": "id",
    "name": "title",
    "description": "description",
    "availability": "availability",
    "condition": "condition",
    "url": "link",
    "image_url": "image_link",
    "additional_image_urls": "additional_image_link",
    "brand": "brand",
    "gtin": "gtin",
    "manufacturer_part_number": "mpn",
    "retailer_product_group_id": "item_group_id",
    "color": "color",
    "size": "size",
    "gender": "gender",
    "age_group": "age_group",
    "material": "material",
    "pattern": "pattern",
    "category": "google_product_category",
    "product_type": "product_type",
    **{f"custom_label_{i}": f"custom_label_{i}" for i in range(5)},
}
_LIST_FIELDS = frozenset({"additional_image_link"})
_LOWER_FIELDS = frozenset({"availability", "condition", "gender", "age_group", "visibility"})
#: Google's availability words (underscored in its XML) in Meta's spelling.
_AVAILABILITY = {"in_stock": "in stock", "out_of_stock": "out of stock", "backorder": "available for order"}
_PRICE = re.compile(r"^\s*(\d+)(?:[.,](\d+))?\s+([A-Za-z]{3})\s*$")


#: Optional fields Meta refuses the whole item for when it cannot read them: one FireFeed cannot put in Meta's
#: form is sent as "" (unset: an UPDATE keeps a field it is not given, so an old value would stay live) and named.
#: The required ones (Meta's list: id, title, description, availability, condition, price, link, image_link,
#: brand) go as they are, for Meta to refuse the item in its own words.
_OPTIONAL_PRICES = frozenset({"sale_price"})


def to_meta(key: str, item: dict[str, Any]) -> dict[str, Any]:
    """The items_batch `data` of one export item: mapped fields only, every one present ("" when empty)."""
    return to_meta_checked(key, item)[0]


def to_meta_checked(key: str, item: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """`to_meta`, and the (column, why) of each optional field it left out (sent as "") as unreadable."""
    data: dict[str, Any] = {}
    left_out: list[tuple[str, str]] = []
    for column, value in item.items():
        field = FIELDS.get(column)
        if field is None:
            continue
        data[field] = meta_value(field, value)
        if field in _OPTIONAL_PRICES and data[field] != "" and not _PRICE.match(data[field]):
            left_out.append((column, f"{data[field]!r} is not a price with its currency, as '12.34 EUR'"))
            data[field] = ""
    data["id"] = key  # the retailer id the engine hands: the export's id value (the sync's channel id)
    return data, sorted(left_out)


def unmapped_columns(columns: Sequence[str]) -> list[str]:
    """The export's columns a Meta catalog is not sent (for a warning at apply or in the report)."""
    return [c for c in columns if c not in FIELDS]


def comparable(item: dict[str, Any]) -> dict[str, Any]:
    """An export item in the form `list_items` gives back a product (mapped fields, the same spellings), so
    `sync repair` can compare what the ledger sent with what the catalog holds; empty fields are left out."""
    data = to_meta("", item)
    # no id: the product's retailer id is its key (RemoteItem.key), whatever the export's id column says
    return {k: v for k, v in data.items() if k != "id" and v not in ("", [])}


def meta_value(field: str, value: Any) -> Any:
    """One value as Meta takes it for `field`."""
    if value is None:
        return ""  # an UPDATE unsets a field given "" (null leaves it as it was), a list field too
    if field in _LIST_FIELDS:
        values = [str(v) for v in (value if isinstance(value, list) else [value]) if v not in (None, "")]
        return values or ""
    if isinstance(value, list):  # one value per field on Meta: product_type takes the first path
        value = value[0] if field == "product_type" and value else ",".join(str(v) for v in value)
    text = str(value).strip() if not isinstance(value, bool) else ("true" if value else "false")
    if field in ("price", "sale_price"):
        return meta_price(text)
    if field in _LOWER_FIELDS:
        text = text.lower()
        if field == "availability":
            text = _AVAILABILITY.get(text, text)
    return text


def meta_price(text: str) -> str:
    """`12,5 eur` -> `12.50 EUR` (Meta's form: a dot, two decimals, the code); anything else as it is, for
    Meta to refuse that item with its own message."""
    found = _PRICE.match(text)
    if not found:
        return text
    amount = Decimal(f"{found.group(1)}.{found.group(2) or '0'}")
    return f"{amount:.2f} {found.group(3).upper()}"


def remote_item(product: dict[str, Any]) -> RemoteItem:
    """A product of the products edge in the export's columns, with what Meta says is wrong with it."""
    item: dict[str, Any] = {}
    for read, column in READ_FIELDS.items():
        found = product.get(read)
        if found not in (None, "", []) and column != "id":  # the retailer id is the key, not a column
            item[column] = meta_value(column, found)
    currency = str(product.get("currency") or "")
    for name in ("price", "sale_price"):
        amount = read_price(product.get(name), currency)
        if amount:
            item[name] = amount
    # Stored per item in the ledger and shown: a few short codes and cut messages, whatever the answer holds.
    errors = product.get("errors")
    issues = [
        Issue(
            code=str(e.get("error_type") or e.get("title") or "error")[:100],
            severity={"HIGH": "error", "MEDIUM": "warning", "LOW": "info"}.get(
                str(e.get("error_priority") or "").upper(), "error"
            ),
            message=str(e.get("description") or e.get("title") or "")[:1000],
        )
        for e in (errors if isinstance(errors, list) else [])[:50]
        if isinstance(e, dict)
    ]
    if not issues and str(product.get("review_status") or "").lower() == "rejected":
        issues.append(Issue(code="rejected", severity="error", message="Meta's review rejected the item"))
    return RemoteItem(key=str(product.get("retailer_id") or ""), item=item, issues=tuple(issues))


def read_price(value: Any, currency: str) -> str:
    """A price as the Graph reads it back ("€1,234.50" with currency "EUR") as the export writes it."""
    if value in (None, ""):
        return ""
    text = str(value)
    if _PRICE.match(text):  # already "12.34 EUR"
        return meta_price(text)
    number = re.sub(r"[^\d.]", "", text.replace(",", ""))  # en_US formatting: "," groups thousands
    try:
        amount = Decimal(number)
    except InvalidOperation:
        return text
    return f"{amount:.2f} {currency.upper()}" if currency else text
