"""What the Merchant API stand-in accepts as a ProductInput: the JSON form of Google's products v1 protos
(`google/shopping/merchant/products/v1/productinputs.proto` and `products_common.proto`, and
`google/shopping/type/types.proto`), as strict as Google's front end is on the points a sender gets wrong:

- a field name Google does not know is refused ("Invalid JSON payload received. Unknown name ...");
- an enum takes only its value names (``IN_STOCK``, not ``in stock`` or ``in_stock``);
- an int64 travels as a JSON string of digits (``"12340000"``; proto3 JSON's canonical form), a double as
  a number, a bool as ``true``/``false``, a string as a string, a repeated field as an array;
- a Timestamp is an RFC 3339 date-time (``2026-12-01T00:00:00Z``, or with a ``+01:00`` offset), an
  Interval two of them;
- a Price's ``currencyCode`` is three capital letters.

Every ProductAttributes field of the reference is named here (so nothing FireFeed might send is refused for
being unknown when Google knows it); the message fields FireFeed never sends are checked as objects only.
"""

from __future__ import annotations

import re
from typing import Any

_ENUMS: dict[str, frozenset[str]] = {
    "AgeGroup": frozenset({"ADULT", "KIDS", "TODDLER", "INFANT", "NEWBORN"}),
    "Availability": frozenset({"IN_STOCK", "OUT_OF_STOCK", "PREORDER", "LIMITED_AVAILABILITY", "BACKORDER"}),
    "Condition": frozenset({"NEW", "USED", "REFURBISHED"}),
    "Gender": frozenset({"MALE", "FEMALE", "UNISEX"}),
    "SizeSystem": frozenset({"AU", "BR", "CN", "DE", "EU", "FR", "IT", "JP", "MEX", "UK", "US"}),
    "SizeType": frozenset({"REGULAR", "PETITE", "MATERNITY", "BIG", "TALL", "PLUS"}),
    "EnergyEfficiencyClass": frozenset({"APPP", "APP", "AP", "A", "B", "C", "D", "E", "F", "G"}),
    "PickupMethod": frozenset({"NOT_SUPPORTED", "BUY", "RESERVE", "SHIP_TO_STORE"}),
    "PickupSla": frozenset(
        {"SAME_DAY", "NEXT_DAY", "TWO_DAY", "THREE_DAY", "FOUR_DAY", "FIVE_DAY", "SIX_DAY", "MULTI_WEEK"}
    ),
    "Pause": frozenset({"ADS", "ALL"}),
    "Destination": frozenset(
        {
            "SHOPPING_ADS",
            "DISPLAY_ADS",
            "LOCAL_INVENTORY_ADS",
            "FREE_LISTINGS",
            "FREE_LOCAL_LISTINGS",
            "YOUTUBE_SHOPPING",
            "YOUTUBE_SHOPPING_CHECKOUT",
            "YOUTUBE_AFFILIATE",
            "FREE_VEHICLE_LISTINGS",
            "VEHICLE_ADS",
            "CLOUD_RETAIL",
        }
    ),
}

# A field's type: a scalar kind ("string", "bool", "int64", "double", "float", "Timestamp", "Interval"), an
# enum ("enum:Availability"), a message named in _MESSAGES, or "object" (a message FireFeed never sends).
_PRICE = {"amountMicros": "int64", "currencyCode": "currency"}
_VALUE_UNIT = {"value": "double", "unit": "string"}
_MESSAGES: dict[str, dict[str, str]] = {
    "Price": _PRICE,
    "ProductDimension": _VALUE_UNIT,
    "ProductWeight": _VALUE_UNIT,
    "ShippingWeight": _VALUE_UNIT,
    "ShippingDimension": _VALUE_UNIT,
    "UnitPricingMeasure": _VALUE_UNIT,
    "UnitPricingBaseMeasure": {"value": "int64", "unit": "string"},
    "Shipping": {
        "price": "Price",
        "country": "string",
        "region": "string",
        "service": "string",
        "locationId": "int64",
        "locationGroupName": "string",
        "postalCode": "string",
        "minHandlingTime": "int64",
        "maxHandlingTime": "int64",
        "minTransitTime": "int64",
        "maxTransitTime": "int64",
        "handlingCutoffTime": "string",
        "handlingCutoffTimezone": "string",
        "loyaltyProgramLabel": "string",
        "loyaltyTierLabel": "string",
    },
    "ProductDetail": {"sectionName": "string", "attributeName": "string", "attributeValue": "string"},
}

#: ProductAttributes, every field of the reference: JSON name -> (type, repeated).
PRODUCT_ATTRIBUTES: dict[str, tuple[str, bool]] = {
    "identifierExists": ("bool", False),
    "isBundle": ("bool", False),
    "title": ("string", False),
    "description": ("string", False),
    "link": ("string", False),
    "mobileLink": ("string", False),
    "canonicalLink": ("string", False),
    "imageLink": ("string", False),
    "additionalImageLinks": ("string", True),
    "expirationDate": ("Timestamp", False),
    "disclosureDate": ("Timestamp", False),
    "adult": ("bool", False),
    "ageGroup": ("enum:AgeGroup", False),
    "availability": ("enum:Availability", False),
    "availabilityDate": ("Timestamp", False),
    "brand": ("string", False),
    "color": ("string", False),
    "condition": ("enum:Condition", False),
    "gender": ("enum:Gender", False),
    "googleProductCategory": ("string", False),
    "gtins": ("string", True),
    "itemGroupId": ("string", False),
    "material": ("string", False),
    "mpn": ("string", False),
    "pattern": ("string", False),
    "price": ("Price", False),
    "maximumRetailPrice": ("Price", False),
    "installment": ("object", False),
    "subscriptionCost": ("object", False),
    "loyaltyPoints": ("object", False),
    "loyaltyPrograms": ("object", True),
    "productTypes": ("string", True),
    "salePrice": ("Price", False),
    "salePriceEffectiveDate": ("Interval", False),
    "sellOnGoogleQuantity": ("int64", False),
    "productHeight": ("ProductDimension", False),
    "productLength": ("ProductDimension", False),
    "productWidth": ("ProductDimension", False),
    "productWeight": ("ProductWeight", False),
    "shipping": ("Shipping", True),
    "carrierShipping": ("object", True),
    "freeShippingThreshold": ("object", True),
    "shippingWeight": ("ShippingWeight", False),
    "shippingLength": ("ShippingDimension", False),
    "shippingWidth": ("ShippingDimension", False),
    "shippingHeight": ("ShippingDimension", False),
    "maxHandlingTime": ("int64", False),
    "minHandlingTime": ("int64", False),
    "shippingHandlingBusinessDays": ("object", True),
    "shippingTransitBusinessDays": ("object", True),
    "handlingCutoffTimes": ("object", True),
    "shippingLabel": ("string", False),
    "returnPolicyLabel": ("string", False),
    "transitTimeLabel": ("string", False),
    "size": ("string", False),
    "sizeSystem": ("enum:SizeSystem", False),
    "sizeTypes": ("enum:SizeType", True),
    "energyEfficiencyClass": ("enum:EnergyEfficiencyClass", False),
    "minEnergyEfficiencyClass": ("enum:EnergyEfficiencyClass", False),
    "maxEnergyEfficiencyClass": ("enum:EnergyEfficiencyClass", False),
    "unitPricingMeasure": ("UnitPricingMeasure", False),
    "unitPricingBaseMeasure": ("UnitPricingBaseMeasure", False),
    "multipack": ("int64", False),
    "adsGrouping": ("string", False),
    "adsLabels": ("string", True),
    "adsRedirect": ("string", False),
    "costOfGoodsSold": ("Price", False),
    "productDetails": ("ProductDetail", True),
    "productHighlights": ("string", True),
    "displayAdsId": ("string", False),
    "displayAdsSimilarIds": ("string", True),
    "displayAdsTitle": ("string", False),
    "displayAdsLink": ("string", False),
    "displayAdsValue": ("double", False),
    "promotionIds": ("string", True),
    "pickupMethod": ("enum:PickupMethod", False),
    "pickupSla": ("enum:PickupSla", False),
    "pickupCost": ("object", False),
    "linkTemplate": ("string", False),
    "mobileLinkTemplate": ("string", False),
    **{f"customLabel{i}": ("string", False) for i in range(5)},
    "includedDestinations": ("enum:Destination", True),
    "excludedDestinations": ("enum:Destination", True),
    "shoppingAdsExcludedCountries": ("string", True),
    "externalSellerId": ("string", False),
    "pause": ("enum:Pause", False),
    "lifestyleImageLinks": ("string", True),
    "cloudExportAdditionalProperties": ("object", True),
    "virtualModelLink": ("string", False),
    "certifications": ("object", True),
    "structuredTitle": ("object", False),
    "structuredDescription": ("object", False),
    "autoPricingMinPrice": ("Price", False),
    "sustainabilityIncentives": ("object", True),
    "videoLinks": ("string", True),
    "minimumOrderValues": ("object", True),
    "shortTitle": ("string", False),
    "itemGroupTitle": ("string", False),
    "documentLinks": ("string", True),
    "variantOptions": ("object", True),
    "relatedProducts": ("object", True),
    "questionsAndAnswers": ("object", True),
    # vehicles and properties: the vertical fields, never sent by a product feed
    **{
        name: ("object", False)
        for name in (
            "vin",
            "model",
            "trim",
            "bodyStyle",
            "year",
            "mileage",
            "electricRange",
            "fuelConsumption",
            "fuelConsumptionDischargedBattery",
            "energyConsumption",
            "co2Emissions",
            "dateFirstRegistered",
            "engine",
            "emissionsStandard",
            "certifiedPreOwned",
            "vehicleMsrp",
            "vehicleAllInPrice",
            "vehiclePriceType",
            "vehicleMandatoryInspectionIncluded",
            "vehicleExpenses",
            "warranty",
            "displayAddress",
            "latitude",
            "longitude",
            "neighborhood",
            "unitArea",
            "numberOfUnits",
            "propertyName",
            "numberOfBedrooms",
            "numberOfBathrooms",
            "propertyType",
            "amenityFeature",
            "utilitiesIncluded",
            "petPolicy",
            "specialtyHousingType",
            "productFee",
            "popularityRank",
        )
    },
}

#: ProductInput's fields a client may send (the rest are output only).
PRODUCT_INPUT = frozenset(
    {"name", "legacyLocal", "offerId", "contentLanguage", "feedLabel", "versionNumber", "productAttributes"}
    | {"customAttributes"}
)
_INT64 = re.compile(r"^-?\d{1,19}$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")
_FEED_LABEL = re.compile(r"^[A-Z0-9_-]{1,20}$")


class Invalid(ValueError):
    """A ProductInput Google's front end would refuse (400 INVALID_ARGUMENT), with Google's wording."""


def check_product_input(body: dict[str, Any]) -> None:
    """Raise Invalid for a ProductInput the Merchant API would refuse for its form."""
    for name in body:
        if name not in PRODUCT_INPUT:
            raise Invalid(
                f"Invalid JSON payload received. Unknown name \"{name}\" at 'product_input': Cannot find field."
            )
    label = body.get("feedLabel")
    if isinstance(label, str) and not _FEED_LABEL.match(label):
        raise Invalid(f"[feed_label] Invalid feed label {label!r}: A-Z, 0-9, hyphen and underscore, at most 20.")
    attrs = body.get("productAttributes", {})
    _message(
        attrs, {k: v[0] for k, v in PRODUCT_ATTRIBUTES.items()}, "product_input.product_attributes", PRODUCT_ATTRIBUTES
    )
    custom = body.get("customAttributes", [])
    if not isinstance(custom, list):
        raise Invalid(
            "Invalid value at 'product_input.custom_attributes': Proto field is repeating, an array is expected."
        )
    for entry in custom:
        _custom(entry, "product_input.custom_attributes")


def _custom(entry: Any, where: str) -> None:
    if not isinstance(entry, dict):
        raise Invalid(f"Invalid value at '{where}': an object is expected.")
    for name, value in entry.items():
        if name in ("name", "value"):
            _scalar(value, "string", f"{where}.{name}")
        elif name == "groupValues" and isinstance(value, list):
            for sub in value:
                _custom(sub, f"{where}.group_values")
        else:
            raise Invalid(f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': Cannot find field.")
    if not entry.get("name") or (not entry.get("value") and not entry.get("groupValues")):
        raise Invalid(f"[{where}] A custom attribute needs a name and exactly one of value or group values.")


def _message(
    value: Any, fields: dict[str, str], where: str, repeated: dict[str, tuple[str, bool]] | None = None
) -> None:
    if not isinstance(value, dict):
        raise Invalid(f"Invalid value at '{where}': Starting an object on a scalar field.")
    for name, item in value.items():
        kind = fields.get(name)
        if kind is None:
            raise Invalid(f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': Cannot find field.")
        at = f"{where}.{_snake(name)}"
        if repeated is not None and repeated[name][1]:
            if not isinstance(item, list):
                raise Invalid(f"Invalid value at '{at}': Proto field is repeating, an array is expected.")
            for element in item:
                _value(element, kind, at)
        else:
            _value(item, kind, at)


def _value(value: Any, kind: str, where: str) -> None:
    if kind == "object":
        if not isinstance(value, dict):
            raise Invalid(f"Invalid value at '{where}': Starting an object on a scalar field.")
    elif kind in _MESSAGES:
        _message(value, _MESSAGES[kind], where)
    elif kind == "Interval":
        _message(value, {"startTime": "Timestamp", "endTime": "Timestamp"}, where)
    else:
        _scalar(value, kind, where)


def _scalar(value: Any, kind: str, where: str) -> None:
    if isinstance(value, (dict, list)):
        raise Invalid(f"Invalid value at '{where}': a {kind} is expected, not an {type(value).__name__}.")
    ok: bool
    if kind.startswith("enum:"):
        ok = isinstance(value, str) and value in _ENUMS[kind[5:]]
    elif kind == "string":
        ok = isinstance(value, str)
    elif kind == "currency":
        ok = isinstance(value, str) and bool(_CURRENCY.match(value))
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int64":
        ok = isinstance(value, str) and bool(_INT64.match(value))
    elif kind in ("double", "float"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == "Timestamp":
        ok = isinstance(value, str) and bool(_RFC3339.match(value))
    else:  # pragma: no cover - a kind this table forgot
        raise AssertionError(kind)
    if not ok:
        raise Invalid(f"Invalid value at '{where}' ({kind}), {value!r}")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()
