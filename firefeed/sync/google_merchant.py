"""The `google-merchant` channel client: an export's items pushed to Google's Merchant API (products v1)
one product input at a time (SPEC 10 C9-C10), over plain httpx with google-auth for the token.

The issue named `google-shopping-merchant-products` with its REST transport. It works here (its REST
transport takes an http:// host, so the stand-in can stand in), but it was measured against plain httpx on
the same stand-in, 1,000 inserts of one product each: 1.3 ms of the client's CPU per insert one at a time
and 2.0 ms from 16 threads for the library, 0.66 ms and 1.2 ms for httpx. It also brings grpcio, protobuf,
proto-plus, google-api-core, googleapis-common-protos, grpcio-status and opentelemetry-api into every
worker for three REST calls, retries on its own (the engine paces and retries, with a budget per minute),
and its `requests` session pools 10 connections where the engine sends from up to 64 threads. So the
three calls are written here from Google's published REST reference (the paths are the library's own):

- ``POST /products/v1/accounts/{account}/productInputs:insert?dataSource=accounts/{account}/dataSources/{ds}``
- ``DELETE /products/v1/accounts/{account}/productInputs/{name}?dataSource=...``, the name's last segment
  the unpadded base64url of ``{contentLanguage}~{feedLabel}~{offerId}`` (the form Google recommends, and
  the one any offer id survives, `/`, `~` and `%` included)
- ``GET /products/v1/accounts/{account}/products?pageSize=1000&pageToken=...``

The token comes from google-auth's service-account credentials (the JWT-bearer grant at the JSON's
``token_uri``, so a local token endpoint works in tests), fetched through the same httpx client, so the
fetcher's host rules hold the token URI to the same standard as the base URL: a service-account JSON is
company input, and its ``token_uri`` is a URL FireFeed would POST to.

What an answer means (one operation per request: `limits.max_batch` is 1, the engine's threads make the
parallelism):

- 200, and 404 for a delete (Google does not hold it: the delete's aim is met): ok.
- 429, ``RESOURCE_EXHAUSTED`` or a ``quota/...`` reason: `ChannelBusy(quota=True)`, with ``Retry-After``
  when Google sends one. 500 and 503: `ChannelBusy` (Google asks for backoff on both).
- another 5xx, or no answer in time (the request may have landed): that item's outcome, ``retry=True``.
- 401, or 403: the token is fetched again and the request repeated once; a second refusal, a token
  endpoint that refuses the key, or 404 on an insert (no such account or data source): `ChannelDown`.
- any other 4xx (400 INVALID_ARGUMENT ...): that item is refused, Google's status and message as-is.
- an item whose required attribute (`REQUIRED`) FireFeed cannot put in Google's form (a price that is not
  "AMOUNT CURRENCY", an availability Google has no value for) is refused without a request, code ``not_sent``;
  any other attribute it cannot read (a weight without a unit, ``identifier_exists: maybe``) is left out of
  the product input, which is sent, and named in the outcome's ``left_out``.

No message this module raises or logs holds the token, the private key or its id: each passes through
`_mask` (and the Resolver that expanded the secret), and httpx's exceptions, which hold the request and
its headers, are never chained.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import httpx
from google.auth import exceptions as auth_exceptions
from google.auth import transport as auth_transport
from google.oauth2 import service_account

from firefeed.errors import FireFeedError
from firefeed.pipeline._netguard import GuardedTransport, tls_context
from firefeed.sync.channel import (
    ChannelBusy,
    ChannelDown,
    Issue,
    Limits,
    Op,
    Operation,
    Outcome,
    RemoteItem,
)

if TYPE_CHECKING:
    from firefeed.config import Settings
    from firefeed.secrets.references import Resolver
    from firefeed.spec.sync import GoogleMerchantSync

log = logging.getLogger(__name__)

NAME = "google-merchant"
DEFAULT_URL = "https://merchantapi.googleapis.com"
GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"
SCOPE = "https://www.googleapis.com/auth/content"
#: One product input per request: the Merchant API has no batch call (custom batch went with the Content API).
LIMITS = Limits(max_batch=1)
#: products.list's largest page.
PAGE_SIZE = 1000
_MESSAGE_MAX = 1000
#: A token endpoint's answer (an access token and its lifetime: a few KB at most).
_TOKEN_ANSWER_MAX = 64 * 1024
#: A code (Google's status, an issue's code or attribute) as stored in the ledger and shown: Google's are short
#: words; a longer one is cut, as a message is, so no answer can make a ledger row or a report large.
_CODE_MAX = 100
#: Issues kept per product (Google repeats an issue per reporting context; a handful is all a product has).
_ISSUES_MAX = 50


class _NotSendable(Exception):
    """An item value FireFeed cannot put in Google's form: refused without a request."""


# ---------------------------------------------------------------------------------------------------------
# The mapping: export column (Google's feed attribute names) -> ProductInput.productAttributes field.
#
# Each kind is a pair of functions: to Google's JSON form, and back to the text the export writes, so that
# `comparable(item)` (there and back) and `list_items` (back) give the same spelling for the same value.
# A column not in the table goes to customAttributes, as Google's own feed reader does with an unknown one.


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _values(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [t for t in (_text(v) for v in values if v is not None) if t]


_PRICE = re.compile(r"^(?:([A-Za-z]{3})\s*)?(-?[\d.,]+)\s*([A-Za-z]{3})?$")
_MICROS = Decimal(1_000_000)


def _price_to(value: Any) -> dict[str, str]:
    """ "12.34 EUR" (also "12,34 EUR", "EUR 12.34", "1,234.50 EUR") -> {amountMicros, currencyCode}."""
    text = _text(value)
    found = _PRICE.match(text)
    currency = (found.group(1) or found.group(3)) if found else None
    if not found or not currency or (found.group(1) and found.group(3)):
        raise _NotSendable(f"{text!r} is not a price with its currency, as '12.34 EUR'")
    number = _decimal_text(found.group(2))
    try:
        micros = (Decimal(number) * _MICROS).to_integral_value()
    except InvalidOperation:
        raise _NotSendable(f"{text!r} is not a price with its currency, as '12.34 EUR'") from None
    return {"amountMicros": str(micros), "currencyCode": currency.upper()}


def _decimal_text(number: str) -> str:
    """ "1.234,50" / "1,234.50" / "19,9" -> a dot decimal: the last of two kinds of separator is the decimal
    one; a lone comma is a decimal comma (as in most of Europe); a separator repeated is a thousands one."""
    if "," in number and "." in number:
        thousands = "." if number.rfind(",") > number.rfind(".") else ","
        return number.replace(thousands, "").replace(",", ".")
    for sep in (",", "."):
        if number.count(sep) > 1:
            return number.replace(sep, "")
    return number.replace(",", ".")


def _price_back(value: Any) -> str:
    amount = Decimal(str(value.get("amountMicros", "0"))) / _MICROS
    shown = f"{amount:.2f}" if amount == amount.quantize(Decimal("0.01")) else f"{amount.normalize():f}"
    return f"{shown} {value.get('currencyCode', '')}".strip()


_MEASURE = re.compile(r"^(-?\d+(?:[.,]\d+)?)\s*([A-Za-z]+)$")


def _measure_to(value: Any) -> dict[str, Any]:
    """ "1.5 kg" -> {value: 1.5, unit: "kg"} (shipping and product weights and dimensions)."""
    text = _text(value)
    found = _MEASURE.match(text)
    if not found:
        raise _NotSendable(f"{text!r} is not a number and a unit, as '1.5 kg'")
    return {"value": float(found.group(1).replace(",", ".")), "unit": found.group(2).lower()}


def _measure_back(value: Any) -> str:
    return f"{float(value.get('value', 0)):g} {value.get('unit', '')}".strip()


def _unit_measure_to(value: Any) -> dict[str, Any]:
    measure = _measure_to(value)
    return {"value": measure["value"], "unit": measure["unit"]}


def _base_measure_to(value: Any) -> dict[str, Any]:
    """unit_pricing_base_measure: an integer and a unit ("100 ml"); Google's int64 travels as a string."""
    measure = _measure_to(value)
    if measure["value"] != int(measure["value"]):
        raise _NotSendable(f"{_text(value)!r}: the base measure's number is a whole number, as '100 ml'")
    return {"value": str(int(measure["value"])), "unit": measure["unit"]}


def _bool_to(value: Any) -> bool:
    text = _text(value).lower()
    if text in ("yes", "true", "1", "y"):
        return True
    if text in ("no", "false", "0", "n"):
        return False
    raise _NotSendable(f"{text!r} is not yes or no")


def _bool_back(value: Any) -> str:
    return "yes" if value else "no"


def _int_to(value: Any) -> str:
    text = _text(value)
    if not re.fullmatch(r"-?\d+", text):
        raise _NotSendable(f"{text!r} is not a whole number")
    return str(int(text))  # int64 is a JSON string in Google's REST form


_DATE_TIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2})(:\d{2}(?:\.\d{1,9})?)?)?\s*(Z|[+-]\d{2}(?::?\d{2})?)?$", re.IGNORECASE
)


def _timestamp_to(value: Any) -> str:
    """A date as Google's feed spec writes it (ISO 8601: "2026-12-25T13:00-0800", "2026-12-25T13:00Z", a date
    alone) -> the RFC 3339 date-time the Merchant API's Timestamp fields take ("2026-12-25T13:00:00-08:00");
    no offset is UTC, a date alone its midnight."""
    text = _text(value)
    found = _DATE_TIME.match(text)
    if not found:
        raise _NotSendable(f"{text!r} is not a date, as '2026-12-25T13:00-0800' or '2026-12-25'")
    day, minutes, seconds, offset = found.groups()
    zone = (offset or "Z").upper()
    if zone != "Z":
        digits = zone[1:].replace(":", "")
        zone = f"{zone[0]}{digits[:2]}:{digits[2:] or '00'}"
    return f"{day}T{minutes or '00:00'}{seconds or ':00'}{zone}"


def _interval_to(value: Any) -> dict[str, str]:
    """ "2026-12-01T00:00Z/2026-12-24T23:59Z" (Google's feed form) -> {startTime, endTime}, each RFC 3339."""
    text = _text(value)
    start, sep, end = text.partition("/")
    if not sep or not start.strip() or not end.strip():
        raise _NotSendable(f"{text!r} is not a 'start/end' pair of dates")
    return {"startTime": _timestamp_to(start), "endTime": _timestamp_to(end)}


_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$", re.IGNORECASE)


def _timestamp_back(value: Any) -> str:
    """A Timestamp as Google prints it (always UTC, "Z", 0/3/6/9 fractional digits) or as FireFeed sends it (the
    feed's offset) -> one spelling, UTC without the fraction's trailing zeros, so the two compare equal in
    `sync repair`. ValueError for another form (`export_item` keeps that as Google has it)."""
    found = _RFC3339.match(str(value))
    if not found:
        raise ValueError(f"{value!r} is not an RFC 3339 date-time")
    whole, fraction, zone = found.groups()
    offset = "+00:00" if zone.upper() == "Z" else zone
    try:
        utc = datetime.fromisoformat(whole + offset).astimezone(UTC)
    except OverflowError:  # 0001-01-01 with a positive offset: before year 1 in UTC
        raise ValueError(f"{value!r} is out of range") from None
    digits = (fraction or "").rstrip("0")
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + (f".{digits}" if digits else "") + "Z"


def _interval_back(value: Any) -> str:
    return f"{_timestamp_back(value.get('startTime', ''))}/{_timestamp_back(value.get('endTime', ''))}"


def _shipping_to(value: Any) -> list[dict[str, Any]]:
    """ "IT:RM:Express:4.95 EUR" (country:region:service:price, any but the price may be empty) -> Shipping."""
    out = []
    for text in _values(value):
        parts = text.split(":")
        if len(parts) != 4:
            raise _NotSendable(f"shipping {text!r} is not 'country:region:service:price'")
        entry: dict[str, Any] = {"price": _price_to(parts[3])}
        for field, part in zip(("country", "region", "service"), parts[:3], strict=True):
            if part.strip():
                entry[field] = part.strip()
        out.append(entry)
    return out


def _shipping_back(value: Any) -> list[str]:
    return [
        ":".join([s.get("country", ""), s.get("region", ""), s.get("service", ""), _price_back(s.get("price", {}))])
        for s in value
    ]


def _enum(values: Mapping[str, str]) -> tuple[Callable[[Any], str], Callable[[Any], str]]:
    """An enum attribute: the feed's word (any case, space or underscore) -> Google's name, and back."""
    back = {v: k for k, v in values.items()}

    def to(value: Any) -> str:
        text = _text(value).lower().replace(" ", "_")
        found = values.get(text)
        if found is None:
            raise _NotSendable(f"{_text(value)!r} is not one of {', '.join(values)}")
        return found

    return to, lambda value: back.get(str(value), str(value).lower())


def _enum_list(values: Mapping[str, str]) -> tuple[Callable[[Any], list[str]], Callable[[Any], list[str]]]:
    to, back = _enum(values)
    return (lambda value: [to(v) for v in _values(value)]), (lambda value: [back(v) for v in value])


def _upper_words(*words: str) -> dict[str, str]:
    return {w: w.upper() for w in words}


@dataclass(frozen=True)
class Attribute:
    field: str  # the productAttributes field
    to: Callable[[Any], Any]
    back: Callable[[Any], Any]


def _plain(field: str) -> Attribute:
    return Attribute(field, _text, str)


def _many(field: str) -> Attribute:
    """A repeated field the feed writes as one value or a list: back as a list (additional_image_link...)."""
    return Attribute(field, _values, list)


def _one_or_many(field: str) -> Attribute:
    """A repeated field the feed mostly writes once (gtin, product_type): back as text when there is one."""
    return Attribute(field, _values, lambda v: v[0] if len(v) == 1 else list(v))


_AVAILABILITY = _enum(
    {
        "in_stock": "IN_STOCK",
        "out_of_stock": "OUT_OF_STOCK",
        "preorder": "PREORDER",
        "backorder": "BACKORDER",
        "limited_availability": "LIMITED_AVAILABILITY",
    }
)
_CONDITION = _enum(_upper_words("new", "used", "refurbished"))
_GENDER = _enum(_upper_words("male", "female", "unisex"))
_AGE_GROUP = _enum(_upper_words("newborn", "infant", "toddler", "kids", "adult"))
_SIZE_SYSTEM = _enum(_upper_words("au", "br", "cn", "de", "eu", "fr", "it", "jp", "mex", "uk", "us"))
_SIZE_TYPE = _enum_list(_upper_words("regular", "petite", "maternity", "big", "tall", "plus"))
_PAUSE = _enum(_upper_words("ads", "all"))

#: The one table: export column -> how it travels in productAttributes.
ATTRIBUTES: dict[str, Attribute] = {
    "title": _plain("title"),
    "description": _plain("description"),
    "short_title": _plain("shortTitle"),
    "link": _plain("link"),
    "mobile_link": _plain("mobileLink"),
    "canonical_link": _plain("canonicalLink"),
    "link_template": _plain("linkTemplate"),
    "mobile_link_template": _plain("mobileLinkTemplate"),
    "image_link": _plain("imageLink"),
    "additional_image_link": _many("additionalImageLinks"),
    "lifestyle_image_link": _many("lifestyleImageLinks"),
    "video_link": _many("videoLinks"),
    "price": Attribute("price", _price_to, _price_back),
    "sale_price": Attribute("salePrice", _price_to, _price_back),
    "sale_price_effective_date": Attribute("salePriceEffectiveDate", _interval_to, _interval_back),
    "cost_of_goods_sold": Attribute("costOfGoodsSold", _price_to, _price_back),
    "auto_pricing_min_price": Attribute("autoPricingMinPrice", _price_to, _price_back),
    "availability": Attribute("availability", *_AVAILABILITY),
    "availability_date": Attribute("availabilityDate", _timestamp_to, _timestamp_back),
    "expiration_date": Attribute("expirationDate", _timestamp_to, _timestamp_back),
    "condition": Attribute("condition", *_CONDITION),
    "brand": _plain("brand"),
    "gtin": _one_or_many("gtins"),
    "mpn": _plain("mpn"),
    "identifier_exists": Attribute("identifierExists", _bool_to, _bool_back),
    "google_product_category": _plain("googleProductCategory"),
    "product_type": _one_or_many("productTypes"),
    "item_group_id": _plain("itemGroupId"),
    "item_group_title": _plain("itemGroupTitle"),
    "color": _plain("color"),
    "size": _plain("size"),
    "size_system": Attribute("sizeSystem", *_SIZE_SYSTEM),
    "size_type": Attribute("sizeTypes", *_SIZE_TYPE),
    "material": _plain("material"),
    "pattern": _plain("pattern"),
    "gender": Attribute("gender", *_GENDER),
    "age_group": Attribute("ageGroup", *_AGE_GROUP),
    "adult": Attribute("adult", _bool_to, _bool_back),
    "is_bundle": Attribute("isBundle", _bool_to, _bool_back),
    "multipack": Attribute("multipack", _int_to, str),
    "shipping": Attribute("shipping", _shipping_to, _shipping_back),
    "shipping_weight": Attribute("shippingWeight", _measure_to, _measure_back),
    "shipping_length": Attribute("shippingLength", _measure_to, _measure_back),
    "shipping_width": Attribute("shippingWidth", _measure_to, _measure_back),
    "shipping_height": Attribute("shippingHeight", _measure_to, _measure_back),
    "product_weight": Attribute("productWeight", _measure_to, _measure_back),
    "product_length": Attribute("productLength", _measure_to, _measure_back),
    "product_width": Attribute("productWidth", _measure_to, _measure_back),
    "product_height": Attribute("productHeight", _measure_to, _measure_back),
    "shipping_label": _plain("shippingLabel"),
    "return_policy_label": _plain("returnPolicyLabel"),
    "transit_time_label": _plain("transitTimeLabel"),
    "min_handling_time": Attribute("minHandlingTime", _int_to, str),
    "max_handling_time": Attribute("maxHandlingTime", _int_to, str),
    "unit_pricing_measure": Attribute("unitPricingMeasure", _unit_measure_to, _measure_back),
    "unit_pricing_base_measure": Attribute("unitPricingBaseMeasure", _base_measure_to, _measure_back),
    "ads_redirect": _plain("adsRedirect"),
    "ads_grouping": _plain("adsGrouping"),
    "ads_labels": _many("adsLabels"),
    "product_highlight": _many("productHighlights"),
    "promotion_id": _many("promotionIds"),
    "external_seller_id": _plain("externalSellerId"),
    "pause": Attribute("pause", *_PAUSE),
    **{f"custom_label_{i}": _plain(f"customLabel{i}") for i in range(5)},
}
#: productAttributes field -> export column, for reading products back.
COLUMN_OF: dict[str, str] = {a.field: column for column, a in ATTRIBUTES.items()}
#: Columns that are the product's identity, not an attribute.
_IDENTITY = frozenset({"id"})
#: Columns an item is not sent without when FireFeed cannot read them: what Google needs to accept a product at
#: all (title, link, image, price, availability), and condition and adult, which Google reads as "new" and "not
#: adult" when absent (a used or an adult product would be shown as what it is not). Any other unreadable value
#: is left out of the product and named (`readable_attributes`).
REQUIRED = frozenset({"title", "link", "image_link", "price", "availability", "condition", "adult"})


def readable_attributes(
    item: Mapping[str, Any],
) -> tuple[dict[str, Any], list[dict[str, str]], list[tuple[str, str]]]:
    """An export item as Google's productAttributes and customAttributes, and the (column, why) of each optional
    attribute left out because FireFeed cannot put its value in Google's form, by column name; empty values are
    left out too (an insert replaces the whole product input, so a value left out is a value removed: Google
    holds no stale copy of it). A required attribute (`REQUIRED`) that cannot be read is `_NotSendable`."""
    attributes: dict[str, Any] = {}
    custom: list[dict[str, str]] = []
    left_out: list[tuple[str, str]] = []
    for column, value in item.items():
        if column in _IDENTITY or value is None or value == "" or value == []:
            continue
        known = ATTRIBUTES.get(column)
        if known is None:
            text = ",".join(_values(value))
            if text:
                custom.append({"name": column, "value": text})
            continue
        try:
            converted = known.to(value)
        except _NotSendable as err:
            if column in REQUIRED:
                raise _NotSendable(f"{column}: {err}") from None
            left_out.append((column, str(err)))
            continue
        if converted not in ("", []):
            attributes[known.field] = converted
    return attributes, custom, sorted(left_out)


def product_input(key: str, item: Mapping[str, Any], *, content_language: str, feed_label: str) -> dict[str, Any]:
    """The ProductInput JSON an insert sends for one export item (its key is the offerId); an unreadable value
    is `_NotSendable` (`sendable_input` leaves the optional ones out)."""
    body, left_out = sendable_input(key, item, content_language=content_language, feed_label=feed_label)
    if left_out:
        column, why = left_out[0]
        raise _NotSendable(f"{column}: {why}")
    return body


def sendable_input(
    key: str, item: Mapping[str, Any], *, content_language: str, feed_label: str
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The ProductInput an insert sends, without the optional attributes FireFeed cannot read, and those
    (column, why); a required one unreadable is `_NotSendable`."""
    attributes, custom, left_out = readable_attributes(item)
    body: dict[str, Any] = {
        "offerId": key,
        "contentLanguage": content_language,
        "feedLabel": feed_label,
        "productAttributes": attributes,
    }
    if custom:
        body["customAttributes"] = custom
    return body, left_out


def export_item(product: Mapping[str, Any]) -> dict[str, Any]:
    """A Product (or ProductInput) from Google, in the export's column names and spellings (its offerId is the
    RemoteItem's key, not a column: an export's key need not be its `id` column)."""
    item: dict[str, Any] = {}
    for field, value in (product.get("productAttributes") or {}).items():
        column = COLUMN_OF.get(field)
        if column is None or value in (None, "", []):
            continue  # an attribute FireFeed never sends (Google's own, or one set in Merchant Center)
        try:
            item[column] = ATTRIBUTES[column].back(value)
        except (AttributeError, TypeError, ValueError, InvalidOperation):
            item[column] = value  # a form the table does not know: kept as Google has it, so it compares unequal
    for custom in product.get("customAttributes") or []:
        if custom.get("name") and custom.get("value") not in (None, ""):
            item[str(custom["name"])] = str(custom["value"])
    return item


def comparable(item: Mapping[str, Any]) -> dict[str, Any]:
    """An export item in the form `list_items` gives a product back, so `sync repair` can compare what the
    ledger sent with what Google holds (an attribute left out as unreadable is not there either); an item that
    cannot be sent compares as its raw text."""
    try:
        attributes, custom, _left_out = readable_attributes(item)
    except _NotSendable:
        return {k: v for k, v in item.items() if v not in (None, "", [])}
    return export_item({"productAttributes": attributes, "customAttributes": custom})


def unmapped_columns(columns: Sequence[str]) -> list[str]:
    """The export's columns Google gets as customAttributes (not one of its attributes FireFeed maps)."""
    return [c for c in columns if c not in ATTRIBUTES and c not in _IDENTITY]


def columns_not_sent(columns: Sequence[str]) -> list[str]:
    """None: a column that is not one of Google's attributes travels as a custom attribute."""
    return []


def product_id(content_language: str, feed_label: str, offer_id: str) -> str:
    """The `{productInput}` name segment: unpadded base64url of `lang~label~offer` (safe for any offer id)."""
    raw = f"{content_language}~{feed_label}~{offer_id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


_SEVERITY = {"DISAPPROVED": "error", "DEMOTED": "warning", "NOT_IMPACTED": "info"}
_RANK = {"error": 0, "warning": 1, "info": 2}


def issues_of(product: Mapping[str, Any]) -> tuple[Issue, ...]:
    """productStatus.itemLevelIssues as Issues, one per code and attribute (Google repeats an issue for each
    reporting context: the worst severity is kept); Google's attribute names ("image link") as columns."""
    found: dict[tuple[str, str], Issue] = {}
    for raw in (product.get("productStatus") or {}).get("itemLevelIssues") or []:
        code = str(raw.get("code", ""))[:_CODE_MAX]
        attribute = str(raw.get("attribute", "")).strip().lower().replace(" ", "_")[:_CODE_MAX]
        severity = _SEVERITY.get(str(raw.get("severity", "")), "info")
        message = str(raw.get("description") or raw.get("detail") or "")
        issue = Issue(code=code, severity=severity, attribute=attribute, message=message[:_MESSAGE_MAX])
        seen = found.get((code, attribute))
        if seen is None and len(found) >= _ISSUES_MAX:
            continue
        if seen is None or _RANK[severity] < _RANK[seen.severity]:
            found[(code, attribute)] = issue
    return tuple(found.values())


# ---------------------------------------------------------------------------------------------------------
# google-auth over our httpx client


class _AuthResponse(auth_transport.Response):
    def __init__(self, status: int, headers: Mapping[str, str], data: bytes) -> None:
        self._status, self._headers, self._data = status, headers, data

    @property
    def status(self) -> int:
        return self._status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._headers

    @property
    def data(self) -> bytes:
        return self._data  # decoded already (gzip and the like): read with iter_bytes


class _AuthRequest(auth_transport.Request):
    """google-auth's token requests through the client's own httpx client (and so its host rules)."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client
        self.refused: FireFeedError | None = None

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> _AuthResponse:
        # The token URI is company input (the key's JSON): its answer is read within a deadline and a size, so a
        # server that trickles or never stops sending holds no worker and fills no memory.
        wait = timeout or 30.0
        deadline = time.monotonic() + wait
        try:
            with self._client.stream(method, url, content=body, headers=headers, timeout=wait) as response:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > _TOKEN_ANSWER_MAX:
                        raise auth_exceptions.TransportError(
                            f"the token endpoint's answer is over {_TOKEN_ANSWER_MAX:,} bytes"
                        )
                    if time.monotonic() > deadline:
                        raise auth_exceptions.TransportError(f"the token endpoint did not answer within {wait:g} s")
                    chunks.append(chunk)
        except FireFeedError as err:  # the host rules refused the token URI
            self.refused = err
            raise auth_exceptions.TransportError(f"token URI refused: {err.message}") from None
        except httpx.HTTPError as err:
            raise auth_exceptions.TransportError(f"{type(err).__name__}: {err}") from None
        return _AuthResponse(response.status_code, response.headers, b"".join(chunks))


# ---------------------------------------------------------------------------------------------------------
# the client


class _Timeout(Exception):
    """No answer in time: the request may or may not have landed."""


def _error_of(response: httpx.Response) -> tuple[str, str, str]:
    """(status, message, reason) of a Google error answer (AIP-193), as far as it has them."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return f"HTTP_{response.status_code}", response.reason_phrase or "no message", ""
    reason = ""
    for detail in error.get("details") or []:
        if isinstance(detail, dict):
            reason = str(detail.get("reason") or (detail.get("metadata") or {}).get("REASON") or reason)
    status = str(error.get("status") or f"HTTP_{response.status_code}")[:_CODE_MAX]
    return status, str(error.get("message") or response.reason_phrase or "no message"), reason[:_CODE_MAX]


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: Google sends seconds; the engine's own backoff applies


class GoogleMerchantClient:
    """A ChannelClient for one Merchant Center account and API data source; `client_for` builds it."""

    name = NAME
    limits = LIMITS

    def __init__(
        self,
        *,
        account: str,
        data_source: str,
        content_language: str,
        feed_label: str,
        credentials: str,
        base_url: str = DEFAULT_URL,
        settings: Settings | None = None,
        resolver: Resolver | None = None,
        timeout_s: float = 30.0,
        connections: int = 64,
    ) -> None:
        self._account = account
        self._data_source = f"accounts/{account}/dataSources/{data_source}"
        self._language, self._label = content_language, feed_label
        self._resolver = resolver
        self._base = f"{base_url.rstrip('/')}/products/v1/accounts/{account}"
        self._hidden: list[str] = []
        try:
            info = json.loads(credentials)
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
            self._hide(str(info.get("private_key", "")), str(info.get("private_key_id", "")))
            self._creds = service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])
        except (ValueError, KeyError, TypeError) as err:
            # never the text itself, nor the library's message (it may quote the key)
            raise ChannelDown(
                "the sync's credentials are not a Google service account key (the JSON file a service "
                f"account's Keys tab downloads): {type(err).__name__}"
            ) from None
        token_uri = str(info.get("token_uri") or GOOGLE_TOKEN_URI)
        # Google's own hosts need no guard; any other base URL or token URI (a setting, or the key's JSON,
        # which is company input) is held to the fetcher's host rules.
        transport: httpx.BaseTransport
        if (base_url.rstrip("/") == DEFAULT_URL and token_uri == GOOGLE_TOKEN_URI) or settings is None:
            limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
            transport = httpx.HTTPTransport(verify=tls_context(), limits=limits)
        else:
            transport = GuardedTransport(source="sync", settings=settings)
        self._client = httpx.Client(
            transport=transport,
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": "FireFeed-Sync/1"},
        )
        self._auth = _AuthRequest(self._client)
        self._token_lock = threading.Lock()

    # -- the ChannelClient protocol ----------------------------------------------------------------
    def send(self, ops: Sequence[Operation]) -> list[Outcome]:
        """One request per operation, in order (the engine calls this with one operation from each of its
        threads); ChannelBusy/ChannelDown from any of them ends the call: the engine sends them all again,
        which is harmless (an insert replaces, a delete of what is gone is ok)."""
        return [self._one(op) for op in ops]

    def list_items(self) -> Iterator[RemoteItem]:
        """The products of this data source, language and feed label (products.list answers the whole
        account's: the others are not this sync's to compare or delete), page by page."""
        token = ""
        while True:
            params = {"pageSize": str(PAGE_SIZE), **({"pageToken": token} if token else {})}
            try:
                response = self._call("GET", f"{self._base}/products", params=params)
            except _Timeout:
                raise ChannelBusy("Google did not answer products.list in time") from None
            if response.status_code != 200:
                failed = self._call_error(response, "products.list", item_level=False)
                assert isinstance(failed, Exception)  # item_level=False: always the whole call's
                raise failed
            try:
                answer = response.json()
            except ValueError:
                raise ChannelBusy("Google answered products.list with something that is not JSON") from None
            for product in answer.get("products") or []:
                if (
                    product.get("dataSource", self._data_source) != self._data_source
                    or product.get("contentLanguage") != self._language
                    or product.get("feedLabel") != self._label
                ):
                    continue
                yield RemoteItem(
                    key=str(product.get("offerId", "")), item=export_item(product), issues=issues_of(product)
                )
            token = str(answer.get("nextPageToken") or "")
            if not token:
                return

    def comparable(self, item: dict[str, Any]) -> dict[str, Any]:
        """How Google would echo this export item in `list_items` (what `sync repair` compares)."""
        return comparable(item)

    def close(self) -> None:
        self._client.close()

    # -- one operation -----------------------------------------------------------------------------
    def _one(self, op: Operation) -> Outcome:
        if op.op is Op.INSERT:
            try:
                body, left_out = sendable_input(
                    op.key, op.item or {}, content_language=self._language, feed_label=self._label
                )
            except _NotSendable as err:
                return Outcome(key=op.key, ok=False, code="not_sent", message=self._mask(str(err))[:_MESSAGE_MAX])
            url, method, what = f"{self._base}/productInputs:insert", "POST", "productInputs.insert"
            content: bytes | None = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        else:
            segment = product_id(self._language, self._label, op.key)
            url, method, what = f"{self._base}/productInputs/{segment}", "DELETE", "productInputs.delete"
            content, left_out = None, []
        try:
            response = self._call(method, url, params={"dataSource": self._data_source}, content=content)
        except _Timeout:
            return Outcome(
                key=op.key, ok=False, code="DEADLINE_EXCEEDED", message=f"no answer to {what} in time", retry=True
            )
        if response.status_code == 200 or (op.op is Op.DELETE and response.status_code == 404):
            if op.op is Op.INSERT and left_out:
                said = tuple((column, self._mask(why)[:_MESSAGE_MAX]) for column, why in left_out)
                return Outcome(key=op.key, ok=True, left_out=said)
            return Outcome(key=op.key, ok=True)
        found = self._call_error(response, what, item_level=True, insert=op.op is Op.INSERT)
        if isinstance(found, Exception):
            raise found
        return Outcome(key=op.key, ok=False, code=found[0], message=found[1], retry=found[2])

    def _call_error(
        self, response: httpx.Response, what: str, *, item_level: bool, insert: bool = False
    ) -> Exception | tuple[str, str, bool]:
        """What a non-200 answer means: an exception for the whole call, or (code, message, retry) of one item."""
        code = response.status_code
        status, message, reason = _error_of(response)
        message = self._mask(message)[:_MESSAGE_MAX]
        said = f"Google answered {what} with {code} {status}: {message}"
        if code == 429 or status == "RESOURCE_EXHAUSTED" or reason.startswith("quota/"):
            daily = "daily" in reason
            return ChannelBusy(said, retry_after=_retry_after(response) or (600.0 if daily else None), quota=True)
        if code in (500, 503):
            return ChannelBusy(said, retry_after=_retry_after(response))
        if code in (401, 403):
            return ChannelDown(f"{said} (check the service account key and that it may manage account {self._account})")
        if code == 404 and (insert or not item_level):
            return ChannelDown(f"{said} (is account {self._account} and data source {self._data_source} right?)")
        if code >= 500:
            if not item_level:
                return ChannelBusy(said, retry_after=_retry_after(response))
            return status, message, True
        if not item_level:
            return ChannelDown(said)
        return status, message, False

    # -- one request -------------------------------------------------------------------------------
    def _call(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """The request with a bearer token; a 401 or 403 is met once with a new token."""
        token = self._token()
        for attempt in (1, 2):
            try:
                if self._resolver is not None:
                    with self._resolver.hiding():
                        response = self._client.request(
                            method, url, headers={"Authorization": f"Bearer {token}"}, **kwargs
                        )
                else:
                    response = self._client.request(method, url, headers={"Authorization": f"Bearer {token}"}, **kwargs)
            except httpx.TimeoutException as err:
                if isinstance(err, httpx.ConnectTimeout | httpx.PoolTimeout):
                    raise ChannelBusy(f"Google could not be reached ({type(err).__name__})") from None
                raise _Timeout() from None
            except httpx.TransportError as err:
                # from None: httpx's exception holds the request, its Authorization header included
                raise ChannelBusy(self._mask(f"Google could not be reached ({type(err).__name__}: {err})")) from None
            except FireFeedError as err:  # the host rules refused the base URL: a setting to fix, not to wait out
                raise ChannelDown(self._mask(f"Google base URL refused: {err.message}")) from None
            if response.status_code in (401, 403) and attempt == 1:
                token = self._token(stale=token)
                continue
            return response
        raise AssertionError("unreachable")

    def _token(self, stale: str | None = None) -> str:
        """A valid access token, fetched again when it is about to expire or `stale` was just refused."""
        with self._token_lock:
            if not self._creds.valid or (stale is not None and self._creds.token == stale):
                try:
                    self._creds.refresh(self._auth)
                except auth_exceptions.RefreshError as err:
                    said = self._mask(str(err.args[0]) if err.args else "no reason given")[:_MESSAGE_MAX]
                    if getattr(err, "retryable", False):
                        raise ChannelBusy(f"Google's token endpoint failed: {said}") from None
                    raise ChannelDown(
                        f"Google refused the service account's key ({said}): check the key in the sync's secret"
                    ) from None
                except auth_exceptions.TransportError as err:
                    said = self._mask(str(err))
                    if self._auth.refused is not None:
                        raise ChannelDown(f"Google token URI refused: {said}") from None
                    raise ChannelBusy(f"Google's token endpoint could not be reached: {said}") from None
                if self._creds.token:
                    self._hide(str(self._creds.token))
            return str(self._creds.token)

    def _hide(self, *values: str) -> None:
        for value in values:
            if value and value not in self._hidden:
                self._hidden.append(value)
                # a PEM key is quoted line by line as often as whole
                self._hidden.extend(line for line in value.splitlines() if len(line) >= 16)

    def _mask(self, text: str) -> str:
        for value in sorted(self._hidden, key=len, reverse=True):
            if value in text:
                text = text.replace(value, "[hidden]")
        return self._resolver.mask(text) if self._resolver is not None else text


def client_for(sync: GoogleMerchantSync, references: Resolver, settings: Settings) -> GoogleMerchantClient:
    """The client of an export's `sync: {to: google-merchant, account, data_source, content_language,
    feed_label, credentials}`; the service-account JSON is resolved here, in the worker, through the
    company's Resolver (which also hides it again in any message)."""
    try:
        credentials = references.expand(sync.credentials, source="sync", where="sync.credentials")
    except FireFeedError as err:  # no such secret, or the key can't open it: the sync can't start
        raise ChannelDown(getattr(err, "reason", None) or err.message) from None
    return GoogleMerchantClient(
        account=sync.account,
        data_source=sync.data_source,
        content_language=sync.content_language,
        feed_label=sync.feed_label,
        credentials=credentials,
        base_url=getattr(settings, "google_merchant_url", None) or DEFAULT_URL,
        settings=settings,
        resolver=references,
        connections=max(8, getattr(settings, "sync_threads", 8)),
    )
