"""What each channel rejects or flags in a feed, as data: the checks `diagnostics` runs without any network.

A channel is a set of rules over the export's *output* attributes (the names
the file carries, after `fields` and templates). The checks and their stable
codes:

- `missing`: a required attribute is absent from the export or empty for an item (error).
- `too_long`: a value longer than the channel allows, in characters (`severity` per attribute).
- `price_format`: a price that is not `<number> <ISO 4217 code>` (error). The number is
  digits with an optional decimal part after `.` or `,` (FireFeed's own number reading,
  without a sign: a price is never negative).
- `availability_value`: a value outside the channel's list (error), compared case-insensitively.
- `url`: a link that is not an absolute http(s) URL: `http://` or `https://` (any case),
  a non-empty host, and no space, tab, CR or LF anywhere (error).
- `duplicate_id`: an id carried by an earlier item of the same export (error, counted per
  repeated item: the items the channel would drop).

The channel-grade checks (SPEC 10 C2, `channel_checks`), each on the attributes the export writes:

- `gtin`: a non-empty gtin that is not 8, 12, 13 or 14 digits with a valid GS1 check digit (error).
- `identifier`: no gtin, no mpn, and identifier_exists not no/false (warning; Google only, and only
  for an export that writes at least one of the three: an export without them is not judged).
- `price_value`: a price or sale_price whose number is 0 or negative (error).
- `sale_price`: a sale_price not lower than price, or in another currency (error).
- `url_public`: a link, image_link or additional_image_link (each of the list) whose host a channel
  cannot reach: localhost, a single-label name, a private suffix, a special-purpose IP address (error).
- `html`: a title or description holding an HTML tag or entity (warning).
- `value`: condition, gender or age_group outside the channel's values, in any case (error).
- `variants`: an item of an item_group_id with the same variant attributes as an earlier item of
  its group (warning, counted per repeated item).

Google Merchant Center: https://support.google.com/merchants/answer/7052112 .
Meta catalogs: https://developers.facebook.com/docs/commerce-platform/catalog/fields .
Severity "error" means the channel would reject the item; "warning" that it takes
the item but changes it (Google and Meta truncate an over-long title or description).
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR, WARNING = "error", "warning"
SEVERITIES = (ERROR, WARNING)
CHECKS = (
    "missing",
    "too_long",
    "price_format",
    "availability_value",
    "url",
    "duplicate_id",
    "gtin",
    "identifier",
    "price_value",
    "sale_price",
    "url_public",
    "html",
    "value",
    "variants",
)

#: Active ISO 4217 currency codes (funds, metals and test codes left out: nobody prices in them).
_ISO_4217_TEXT = """
    AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP BYN BZD
    CAD CDF CHF CLP CNY COP CRC CUC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP
    GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD
    KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK
    NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS
    SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS VED VES VND VUV WST
    XAF XCD XCG XOF XPF YER ZAR ZMW ZWG ZWL
"""
ISO_4217 = frozenset(_ISO_4217_TEXT.split())


@dataclass(frozen=True)
class Channel:
    """The rules of one channel; every attribute name is an output name of the export."""

    name: str
    id_attribute: str
    required: tuple[str, ...]
    #: attribute -> (most characters allowed, severity when longer)
    max_length: dict[str, tuple[int, str]]
    price_attributes: tuple[str, ...]
    availability_attribute: str
    #: accepted availability values, lowercase
    availability: frozenset[str]
    url_attributes: tuple[str, ...]
    #: the attribute that says a product has no identifier (the `identifier` check), None: not checked
    identifier_attribute: str | None = None


GOOGLE = Channel(
    name="google",
    id_attribute="id",
    required=("id", "title", "description", "link", "image_link", "availability", "price"),
    max_length={"id": (50, ERROR), "title": (150, WARNING), "description": (5000, WARNING)},
    price_attributes=("price", "sale_price"),
    availability_attribute="availability",
    # Google's values, in the underscore form of its XML spec and the spaced form of its text feeds.
    availability=frozenset(
        {"in_stock", "out_of_stock", "preorder", "backorder", "in stock", "out of stock"},
    ),
    url_attributes=("link", "image_link"),
    identifier_attribute="identifier_exists",
)

META = Channel(
    name="meta",
    id_attribute="id",
    required=("id", "title", "description", "availability", "condition", "price", "link", "image_link", "brand"),
    max_length={"id": (100, ERROR), "title": (200, WARNING), "description": (9999, WARNING)},
    price_attributes=("price", "sale_price"),
    availability_attribute="availability",
    availability=frozenset({"in stock", "out of stock", "preorder", "available for order", "discontinued"}),
    url_attributes=("link", "image_link"),
)

CHANNELS: dict[str, Channel] = {c.name: c for c in (GOOGLE, META)}


def channel(name: str) -> Channel:
    """The channel called `name` (the spec model only lets known names through)."""
    return CHANNELS[name]
