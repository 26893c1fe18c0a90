"""The google-merchant client against the Merchant API stand-in: the attribute table, the service account's
token, insert/delete/list, quota and server trouble, refusals, credentials refused, and a key or token that
never shows (SPEC 10 C9-C10, #51)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from firefeed.config import Settings
from firefeed.secrets.references import Resolver, SpecOrigin
from firefeed.spec.sync import GoogleMerchantSync
from firefeed.sync.channel import ChannelBusy, ChannelDown, Op, Operation, Outcome
from firefeed.sync.google_merchant import (
    LIMITS,
    GoogleMerchantClient,
    client_for,
    comparable,
    export_item,
    issues_of,
    product_id,
    product_input,
    unmapped_columns,
)
from tests.standins.merchant_api import MerchantStandIn
from tests.standins.merchant_schema import Invalid, check_product_input

ACCOUNT = "123"
DATA_SOURCE = "456"
SECRET = "GOOGLE_SA"


def item(key: str, **over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": key,
        "title": f"Shirt {key}",
        "description": "Cotton shirt",
        "link": f"https://shop.example.com/p/{key}",
        "image_link": f"https://shop.example.com/i/{key}.jpg",
        "additional_image_link": [f"https://shop.example.com/i/{key}-2.jpg"],
        "price": "19.90 EUR",
        "availability": "in_stock",
        "condition": "new",
        "brand": "Acme",
        "gtin": "4006381333931",
    }
    out.update(over)
    return out


def insert(key: str, **over: Any) -> Operation:
    return Operation(key=key, op=Op.INSERT, item=item(key, **over))


def delete(key: str) -> Operation:
    return Operation(key=key, op=Op.DELETE)


def settings(**over: Any) -> Settings:
    return Settings(_env_file=None, **{"fetch_allowed_hosts": "127.0.0.1", **over})  # type: ignore[call-arg]


@pytest.fixture(scope="module")
def google() -> Iterator[MerchantStandIn]:
    with MerchantStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def key_json(google: MerchantStandIn) -> str:
    return google.service_account_json()


def resolver(value: str) -> Resolver:
    return Resolver(company="acme", origin=SpecOrigin.REMOTE, secret=lambda name: value if name == SECRET else None)


_open: list[GoogleMerchantClient] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def client(
    standin: MerchantStandIn, key: str, *, account: str = ACCOUNT, label: str = "IT", **kw: Any
) -> GoogleMerchantClient:
    made = _client(standin, key, account=account, label=label, **kw)
    _open.append(made)
    return made


def _client(standin: MerchantStandIn, key: str, *, account: str, label: str, **kw: Any) -> GoogleMerchantClient:
    sync = GoogleMerchantSync(
        to="google-merchant",
        account=account,
        data_source=DATA_SOURCE,
        content_language="it",
        feed_label=label,
        credentials=f"${{secret:{SECRET}}}",
    )
    if kw:
        return GoogleMerchantClient(
            account=account,
            data_source=DATA_SOURCE,
            content_language="it",
            feed_label=label,
            credentials=key,
            base_url=standin.url,
            settings=settings(),
            resolver=resolver(key),
            **kw,
        )
    return client_for(sync, resolver(key), settings(google_merchant_url=standin.url))


def send_one(c: GoogleMerchantClient, op: Operation) -> Outcome:
    [outcome] = c.send([op])
    return outcome


# -------------------------------------------------------------------------------------- the attribute table


def test_an_item_becomes_a_product_input_with_googles_types() -> None:
    full = item(
        "A1",
        sale_price="1.234,5 eur",
        availability="In Stock",
        gender="Female",
        age_group="adult",
        identifier_exists="no",
        product_type="Apparel > Shirts",
        shipping=["IT::Express:4.95 EUR", "DE:::0 EUR"],
        shipping_weight="1,5 KG",
        unit_pricing_base_measure="100 ml",
        multipack="6",
        custom_label_0="summer",
        sale_price_effective_date="2026-12-01T00:00Z/2026-12-24T23:59Z",
        fabric_care="hand wash",
        description="",
        mpn=None,
    )
    assert product_input("A1", full, content_language="it", feed_label="IT") == {
        "offerId": "A1",
        "contentLanguage": "it",
        "feedLabel": "IT",
        "productAttributes": {
            "title": "Shirt A1",
            "link": "https://shop.example.com/p/A1",
            "imageLink": "https://shop.example.com/i/A1.jpg",
            "additionalImageLinks": ["https://shop.example.com/i/A1-2.jpg"],
            "price": {"amountMicros": "19900000", "currencyCode": "EUR"},
            "salePrice": {"amountMicros": "1234500000", "currencyCode": "EUR"},
            "availability": "IN_STOCK",
            "condition": "NEW",
            "brand": "Acme",
            "gtins": ["4006381333931"],
            "gender": "FEMALE",
            "ageGroup": "ADULT",
            "identifierExists": False,
            "productTypes": ["Apparel > Shirts"],
            "shipping": [
                {"price": {"amountMicros": "4950000", "currencyCode": "EUR"}, "country": "IT", "service": "Express"},
                {"price": {"amountMicros": "0", "currencyCode": "EUR"}, "country": "DE"},
            ],
            "shippingWeight": {"value": 1.5, "unit": "kg"},
            "unitPricingBaseMeasure": {"value": "100", "unit": "ml"},
            "multipack": "6",
            "customLabel0": "summer",
            "salePriceEffectiveDate": {"startTime": "2026-12-01T00:00:00Z", "endTime": "2026-12-24T23:59:00Z"},
        },
        "customAttributes": [{"name": "fabric_care", "value": "hand wash"}],
    }
    assert unmapped_columns(list(full)) == ["fabric_care"]
    check_product_input(product_input("A1", full, content_language="it", feed_label="IT"))


@pytest.mark.parametrize(
    ("feed", "rfc3339"),
    [
        ("2026-12-25T13:00-0800", "2026-12-25T13:00:00-08:00"),  # the product data specification's own example
        ("2026-12-25T13:00:30+01:00", "2026-12-25T13:00:30+01:00"),
        ("2026-12-25T13:00Z", "2026-12-25T13:00:00Z"),
        ("2026-12-25T13:00", "2026-12-25T13:00:00Z"),
        ("2026-12-25 13:00:00", "2026-12-25T13:00:00Z"),
        ("2026-12-25", "2026-12-25T00:00:00Z"),
        ("2026-12-25T13:00:00.5+0530", "2026-12-25T13:00:00.5+05:30"),
    ],
)
def test_the_feeds_dates_travel_as_rfc_3339_timestamps(feed: str, rfc3339: str) -> None:
    """The Merchant API's Timestamp fields take RFC 3339 only; Google's feed spelling (ISO 8601 with an offset
    written +hhmm, minutes without seconds, a date alone) is refused there as it stands."""
    body = product_input(
        "A1",
        {"availability_date": feed, "expiration_date": feed, "sale_price_effective_date": f"{feed}/{feed}"},
        content_language="it",
        feed_label="IT",
    )
    attributes = body["productAttributes"]
    assert attributes["availabilityDate"] == attributes["expirationDate"] == rfc3339
    assert attributes["salePriceEffectiveDate"] == {"startTime": rfc3339, "endTime": rfc3339}
    check_product_input(body)
    # what Google echoes reads back as what the item compares as (`sync repair`)
    assert export_item(body)["availability_date"] == comparable({"availability_date": feed})["availability_date"]


@pytest.mark.parametrize(
    ("feed", "echoed"),
    [
        ("2026-12-25T13:00-0800", "2026-12-25T21:00:00Z"),
        ("2026-12-25T13:00:30+01:00", "2026-12-25T12:00:30Z"),
        ("2026-12-25T13:00:00.5+0530", "2026-12-25T07:30:00.500Z"),
        ("2026-12-25", "2026-12-25T00:00:00Z"),
    ],
)
def test_a_date_google_echoes_in_utc_compares_equal_to_the_feed_s_date_with_an_offset(feed: str, echoed: str) -> None:
    """The Merchant API prints a Timestamp in UTC ("Z") with 0, 3, 6 or 9 fractional digits, whatever offset it
    was sent with: `sync repair` must not see every dated item as differing (and send it again each time)."""
    held = export_item(
        {
            "productAttributes": {
                "availabilityDate": echoed,
                "expirationDate": echoed,
                "salePriceEffectiveDate": {"startTime": echoed, "endTime": echoed},
            }
        }
    )
    ours = comparable(
        {"availability_date": feed, "expiration_date": feed, "sale_price_effective_date": f"{feed}/{feed}"}
    )
    assert held == ours


def test_the_stand_in_refuses_what_googles_front_end_refuses_for_its_form() -> None:
    good = product_input("A1", item("A1"), content_language="it", feed_label="IT")
    check_product_input(good)
    bad: list[tuple[str, Any]] = [
        ("availability", "in stock"),
        ("availability", "in_stock"),
        ("price", {"amountMicros": 19900000, "currencyCode": "EUR"}),
        ("price", {"amountMicros": "19.9", "currencyCode": "EUR"}),
        ("price", {"amountMicros": "19900000", "currencyCode": "eur"}),
        ("gtins", "4006381333931"),
        ("identifierExists", "no"),
        ("availabilityDate", "2026-12-25T13:00-0800"),
        ("shippingWeight", {"value": "1.5", "unit": "kg"}),
        ("attributes", {}),  # v1beta's name for productAttributes, inside it
    ]
    for field, value in bad:
        body = json.loads(json.dumps(good))
        body["productAttributes"][field] = value
        with pytest.raises(Invalid):
            check_product_input(body)
    with pytest.raises(Invalid, match='Unknown name "attributes"'):
        check_product_input({**good, "attributes": {}})


def test_what_google_holds_reads_back_in_the_exports_spelling() -> None:
    sent = item("A1", price="19,9 eur", availability="in stock", identifier_exists="TRUE", fabric_care="wool")
    back = export_item(product_input("A1", sent, content_language="it", feed_label="IT"))
    assert back == comparable(sent)
    assert back["price"] == "19.90 EUR"
    assert back["availability"] == "in_stock"
    assert back["identifier_exists"] == "yes"
    assert back["additional_image_link"] == ["https://shop.example.com/i/A1-2.jpg"]
    assert back["gtin"] == "4006381333931"
    assert back["fabric_care"] == "wool"
    assert "id" not in back  # the offerId is the RemoteItem's key
    # a value that differs reads back differently
    assert comparable(item("A1", price="20 EUR")) != back


def test_an_offer_id_of_any_characters_gets_the_encoded_name() -> None:
    assert product_id("en", "US", "sku/123") == "ZW5-VVN-c2t1LzEyMw"  # Google's own example


# -------------------------------------------------------------------------------------- insert, delete, list


def test_inserts_deletes_and_list_against_the_stand_in(google: MerchantStandIn, key_json: str) -> None:
    assert LIMITS.max_batch == 1
    c = client(google, key_json, label="LIST")
    odd = "sku/7~x%y"
    ops = [insert("L1"), insert("L2", image_link="", gtin="4006381333932"), insert(odd)]
    assert [c.send([op]) for op in ops] == [[Outcome(key=op.key, ok=True)] for op in ops]
    held = {k: v for k, v in google.products().items() if v["feedLabel"] == "LIST"}
    assert set(held) == {"L1", "L2", odd}
    assert held["L1"]["productAttributes"]["price"] == {"amountMicros": "19900000", "currencyCode": "EUR"}

    listed = {r.key: r for r in c.list_items()}
    assert set(listed) == {"L1", "L2", odd}
    assert listed["L1"].item == comparable(item("L1")) == c.comparable(item("L1"))
    assert listed["L1"].issues == ()
    assert {(i.code, i.attribute, i.severity) for i in listed["L2"].issues} == {
        ("item_missing_required_attribute", "image_link", "error"),
        ("invalid_upc", "gtin", "error"),
    }

    assert send_one(c, delete(odd)) == Outcome(key=odd, ok=True)
    assert send_one(c, delete("never-sent")) == Outcome(key="never-sent", ok=True)  # Google's 404: gone is gone
    assert {r.key for r in c.list_items()} == {"L1", "L2"}
    assert [r.status for r in google.calls("DELETE", offer_id="never-sent")] == [404]
    c.close()


def test_list_reads_every_page_and_only_this_data_sources_products(google: MerchantStandIn, key_json: str) -> None:
    data_source = f"accounts/{ACCOUNT}/dataSources/{DATA_SOURCE}"
    for n in range(2100):
        google.add_product(ACCOUNT, data_source, {"offerId": f"P{n:04}", "contentLanguage": "it", "feedLabel": "PAGES"})
    google.add_product(
        ACCOUNT,
        f"accounts/{ACCOUNT}/dataSources/999",
        {"offerId": "other-source", "contentLanguage": "it", "feedLabel": "PAGES"},
    )
    google.add_product(
        ACCOUNT, data_source, {"offerId": "other-language", "contentLanguage": "de", "feedLabel": "PAGES"}
    )
    before = len(google.calls("GET"))
    keys = [r.key for r in client(google, key_json, label="PAGES").list_items()]
    assert keys == [f"P{n:04}" for n in range(2100)]
    assert len(google.calls("GET")) - before >= 3  # 1,000 a page


def test_a_repair_sees_a_change_made_behind_firefeeds_back(google: MerchantStandIn, key_json: str) -> None:
    c = client(google, key_json, label="BEHIND")
    c.send([insert("B1")])
    google.edit_product("B1", price={"amountMicros": "1000000", "currencyCode": "EUR"}, imageLink=None)
    [remote] = list(c.list_items())
    assert remote.item != comparable(item("B1"))
    assert remote.item["price"] == "1.00 EUR" and "image_link" not in remote.item


def test_many_threads_share_one_client_and_one_token(key_json: str) -> None:
    with MerchantStandIn(latency_ms=5) as standin:
        key = standin.service_account_json()
        c = client(standin, key)
        outcomes: list[Outcome] = []

        def worker(n: int) -> None:
            for i in range(25):
                outcomes.extend(c.send([insert(f"T{n}-{i}")]))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(outcomes) == 200 and all(o.ok for o in outcomes)
        assert len(standin.products()) == 200
        assert standin.tokens_issued == 1


# -------------------------------------------------------------------------------------- refusals and trouble


def test_a_refused_item_is_an_outcome_with_googles_code_and_message(google: MerchantStandIn, key_json: str) -> None:
    google.refuse_offer("R1", "[price] Invalid price: the amount must be positive")
    c = client(google, key_json, label="REFUSE")
    assert send_one(c, insert("R1")) == Outcome(
        key="R1", ok=False, code="INVALID_ARGUMENT", message="[price] Invalid price: the amount must be positive"
    )
    assert send_one(c, insert("R2")).ok


def test_a_value_google_has_no_form_for_is_refused_without_a_request(google: MerchantStandIn, key_json: str) -> None:
    c = client(google, key_json, label="LOCAL")
    before = len(google.calls())
    outcome = send_one(c, insert("N1", price="nineteen euro"))
    assert (outcome.ok, outcome.code, outcome.retry) == (False, "not_sent", False)
    assert "price" in outcome.message and "12.34 EUR" in outcome.message
    outcome = send_one(c, insert("N2", availability="maybe"))
    assert outcome.code == "not_sent" and "availability" in outcome.message
    assert len(google.calls()) == before


def test_an_unreadable_optional_attribute_is_left_out_and_the_item_sent(google: MerchantStandIn, key_json: str) -> None:
    """A weight without a unit, `identifier_exists: maybe`, a bad shipping line: the item goes live without them,
    and the outcome names each with why (#51)."""
    c = client(google, key_json, label="OPTIONAL")
    outcome = send_one(c, insert("O1", shipping_weight="1.5", identifier_exists="maybe", shipping="IT:4.95"))
    assert (outcome.ok, outcome.code) == (True, "")
    assert [column for column, _why in outcome.left_out] == ["identifier_exists", "shipping", "shipping_weight"]
    assert "'1.5' is not a number and a unit" in dict(outcome.left_out)["shipping_weight"]
    held = google.products(ACCOUNT)["O1"]["productAttributes"]
    assert held["title"] == "Shirt O1" and held["price"] == {"amountMicros": "19900000", "currencyCode": "EUR"}
    assert not {"shippingWeight", "identifierExists", "shipping"} & set(held)
    # what Google echoes compares equal to the item (a repair sends it no more), the readable values as sent
    assert comparable(item("O1", shipping_weight="1.5", identifier_exists="maybe", shipping="IT:4.95")) == (
        export_item(google.products(ACCOUNT)["O1"])
    )
    # a readable item has nothing left out
    assert send_one(c, insert("O2", shipping_weight="1.5 kg")).left_out == ()


@pytest.mark.parametrize(
    ("column", "value"),
    [("price", "nineteen euro"), ("availability", "maybe"), ("condition", "nuovo"), ("adult", "perhaps")],
)
def test_an_unreadable_required_attribute_still_keeps_the_item_from_being_sent(
    google: MerchantStandIn, key_json: str, column: str, value: str
) -> None:
    c = client(google, key_json, label="REQUIRED")
    outcome = send_one(c, insert(f"Q-{column}", **{column: value}, shipping_weight="1.5"))
    assert (outcome.ok, outcome.code) == (False, "not_sent")
    assert outcome.message.startswith(f"{column}: ")
    assert f"Q-{column}" not in google.products(ACCOUNT)


def test_quota_answers_raise_channel_busy_and_lose_nothing(key_json: str) -> None:
    with MerchantStandIn(per_minute=3, retry_after=7) as standin:
        c = client(standin, standin.service_account_json())
        for n in range(3):
            assert send_one(c, insert(f"Q{n}")).ok
        with pytest.raises(ChannelBusy) as busy:
            c.send([insert("Q3")])
        assert busy.value.quota is True and busy.value.retry_after == 7
        assert "429 RESOURCE_EXHAUSTED" in busy.value.message and "request_rate_too_high" in busy.value.message
        with pytest.raises(ChannelBusy) as busy:
            list(c.list_items())
        assert busy.value.quota is True
        assert set(standin.products()) == {"Q0", "Q1", "Q2"}


def test_server_trouble_is_busy_and_a_bad_gateway_is_one_items_retry(google: MerchantStandIn, key_json: str) -> None:
    c = client(google, key_json, label="TROUBLE")
    google.fail_next(1)
    with pytest.raises(ChannelBusy) as busy:
        c.send([insert("S1")])
    assert busy.value.quota is False and "503 UNAVAILABLE" in busy.value.message
    google.fail_next(1, 500, "INTERNAL")
    with pytest.raises(ChannelBusy):
        c.send([insert("S1")])
    google.fail_next(1, 502, "BAD_GATEWAY")
    assert send_one(c, insert("S1")) == Outcome(
        key="S1", ok=False, code="BAD_GATEWAY", message="The service is currently unavailable.", retry=True
    )
    assert send_one(c, insert("S1")).ok


def test_no_answer_in_time_is_a_retry_of_that_item(key_json: str) -> None:
    with MerchantStandIn(latency_ms=600) as standin:
        c = client(standin, standin.service_account_json(), timeout_s=0.2)
        outcome = send_one(c, insert("SLOW"))
        assert (outcome.ok, outcome.code, outcome.retry) == (False, "DEADLINE_EXCEEDED", True)


# -------------------------------------------------------------------------------------- credentials


def test_a_revoked_token_is_fetched_again_once(key_json: str) -> None:
    with MerchantStandIn() as standin:
        c = client(standin, standin.service_account_json())
        assert send_one(c, insert("A1")).ok
        assert send_one(c, insert("A2")).ok
        assert standin.tokens_issued == 1
        standin.revoke_tokens()
        assert send_one(c, insert("A3")).ok
        assert standin.tokens_issued == 2
        assert [r.status for r in standin.calls("POST", offer_id="A3")] == [401, 200]


def test_a_key_google_refuses_is_channel_down(key_json: str) -> None:
    with MerchantStandIn() as standin:
        c = client(standin, standin.service_account_json())
        standin.refuse_credentials()
        with pytest.raises(ChannelDown) as down:
            c.send([insert("D1")])
        assert "invalid_grant" in down.value.message
        assert standin.calls() == []
    # a key the token endpoint never issued (another project's service account)
    with MerchantStandIn() as standin, MerchantStandIn() as stranger, pytest.raises(ChannelDown):
        client(standin, json.dumps({**stranger.service_account_info(), "token_uri": standin.token_uri})).send(
            [insert("D2")]
        )


def test_an_account_the_key_may_not_manage_is_channel_down_after_one_new_token(key_json: str) -> None:
    with MerchantStandIn(accounts={ACCOUNT}) as standin:
        c = client(standin, standin.service_account_json(), account="999")
        with pytest.raises(ChannelDown) as down:
            c.send([insert("X1")])
        assert "403 PERMISSION_DENIED" in down.value.message and "999" in down.value.message
        assert standin.tokens_issued == 2
        with pytest.raises(ChannelDown):
            list(c.list_items())


def test_credentials_that_are_not_a_service_account_key_are_channel_down(google: MerchantStandIn) -> None:
    text = '{"type": "authorized_user", "refresh_token": "1//secret-refresh-token"}'
    with pytest.raises(ChannelDown) as down:
        client(google, text)
    assert "secret-refresh-token" not in str(down.value)
    with pytest.raises(ChannelDown) as down:
        client(google, "not json at all, but a secret-looking-value")
    assert "secret-looking-value" not in str(down.value)


def test_a_missing_secret_is_channel_down_naming_it(google: MerchantStandIn) -> None:
    sync = GoogleMerchantSync(
        to="google-merchant",
        account=ACCOUNT,
        data_source=DATA_SOURCE,
        content_language="it",
        feed_label="IT",
        credentials="${secret:NOT_SET}",
    )
    with pytest.raises(ChannelDown, match="NOT_SET"):
        client_for(sync, resolver("x"), settings(google_merchant_url=google.url))


def test_the_host_rules_hold_the_base_url_and_the_keys_token_uri(google: MerchantStandIn, key_json: str) -> None:
    sync = GoogleMerchantSync(
        to="google-merchant",
        account=ACCOUNT,
        data_source=DATA_SOURCE,
        content_language="it",
        feed_label="IT",
        credentials=f"${{secret:{SECRET}}}",
    )
    strict = Settings(_env_file=None, google_merchant_url=google.url)  # type: ignore[call-arg]
    before = len(google.requests)
    with pytest.raises(ChannelDown, match="refused"):
        client_for(sync, resolver(key_json), strict).send([insert("H1")])
    assert len(google.requests) == before  # not even the token endpoint was asked


# -------------------------------------------------------------------------------------- secrets never show


def test_no_key_or_token_in_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with MerchantStandIn(accounts={ACCOUNT}) as standin:
        info = standin.service_account_info()
        key = json.dumps(info)
        c = client(standin, key)
        messages: list[str] = []
        assert send_one(c, insert("K1")).ok
        standin.revoke_tokens()
        assert send_one(c, insert("K2")).ok
        standin.refuse_offer("K3", "refused")
        messages.append(send_one(c, insert("K3")).message)
        standin.fail_next(1)
        with pytest.raises(ChannelBusy) as busy:
            c.send([insert("K4")])
        messages.append(str(busy.value))
        with pytest.raises(ChannelDown) as down:
            client(standin, key, account="999").send([insert("K5")])
        messages.append(str(down.value))
        standin.refuse_credentials()
        with pytest.raises(ChannelDown) as down:
            client(standin, key).send([insert("K6")])
        messages.append(str(down.value))
        standin.refuse_credentials(False)
        url = standin.url
        standin.stop()
        with pytest.raises(ChannelBusy) as busy:  # the server gone: httpx's error, which holds the request
            c.send([insert("K7")])
        assert url in busy.value.message or "reached" in busy.value.message
        messages.append(str(busy.value))
        tokens = list(standin.issued)
    assert len(tokens) >= 2
    pem_lines = [line for line in info["private_key"].splitlines() if "PRIVATE KEY" not in line]
    shown = "\n".join([*messages, caplog.text])
    for secret in [*tokens, info["private_key_id"], *pem_lines]:
        assert secret not in shown


def test_a_giant_code_or_list_of_issues_is_cut_before_the_ledger(google: MerchantStandIn, key_json: str) -> None:
    # What a refusal or a status says is stored per item in the ledger and shown: bounded whatever the answer.
    c = client(google, key_json, label="HUGE")
    google.fail_next(1, 502, "X" * 200_000)
    outcome = send_one(c, insert("H1"))
    assert outcome.retry and outcome.code == "X" * 100
    raw = [{"code": f"c{n}" + "y" * 10_000, "attribute": "a" * 10_000, "severity": "DEMOTED"} for n in range(5_000)]
    issues = issues_of({"productStatus": {"itemLevelIssues": raw}})
    assert len(issues) == 50 and all(len(i.code) <= 100 and len(i.attribute) <= 100 for i in issues)


class _EndlessTokenEndpoint:
    """A token URI (company input: the key's JSON names it) that answers 200 and then sends bytes for 20 s."""

    def __init__(self) -> None:
        import http.server
        import time

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                began = time.monotonic()
                try:
                    self.wfile.write(b'{"access_token": "')
                    while time.monotonic() - began < 20:
                        self.wfile.write(b"x" * 65536)
                        time.sleep(0.01)
                except OSError:
                    pass  # the client went away: what it should do

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_token_uri_that_never_stops_answering_is_cut_short(google: MerchantStandIn) -> None:
    # The token URI is the company's (in its key's JSON): its answer must not hold a worker or fill its memory.
    import time

    endpoint = _EndlessTokenEndpoint()
    try:
        info = google.service_account_info()
        info["token_uri"] = endpoint.url
        c = client(google, json.dumps(info), label="ENDLESS")
        began = time.monotonic()
        with pytest.raises(ChannelBusy) as busy:
            c.send([insert("E1")])
        assert time.monotonic() - began < 8
        assert "token" in busy.value.message
    finally:
        endpoint.close()
