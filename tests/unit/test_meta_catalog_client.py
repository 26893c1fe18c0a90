"""The meta-catalog client against the Graph stand-in: mapping, one batch per send, polling, per-item
errors, quota and credentials, listing, and a token that never shows (SPEC 10 C9-C10, #51)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from firefeed.config import Settings
from firefeed.secrets.references import Resolver, SpecOrigin
from firefeed.spec.sync import MetaCatalogSync
from firefeed.sync._meta_fields import remote_item
from firefeed.sync.channel import ChannelBusy, ChannelDown, Op, Operation
from firefeed.sync.meta_catalog import (
    GRAPH_VERSION,
    MAX_BATCH,
    BatchTooLarge,
    MetaCatalogClient,
    client_for,
    comparable,
    operation_bytes,
    to_meta,
    unmapped_columns,
)
from tests.standins.meta_graph import MetaGraphStandIn

TOKEN = "EAAGm0PX4ZCpsBAsecret-meta-token-value"
CATALOG = "4242"


def item(key: str, **over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": key,
        "title": f"Shirt {key}",
        "description": "Cotton shirt",
        "availability": "in_stock",
        "condition": "new",
        "price": "19,9 EUR",
        "link": f"https://shop.example.com/p/{key}",
        "image_link": f"https://shop.example.com/i/{key}.jpg",
        "additional_image_link": [f"https://shop.example.com/i/{key}-2.jpg"],
        "brand": "Acme",
        "mpn": f"M-{key}",
        "identifier_exists": "yes",
    }
    out.update(over)
    return out


def insert(key: str, **over: Any) -> Operation:
    return Operation(key=key, op=Op.INSERT, item=item(key, **over))


def delete(key: str) -> Operation:
    return Operation(key=key, op=Op.DELETE)


def settings() -> Settings:
    return Settings(_env_file=None, fetch_allowed_hosts="127.0.0.1")  # type: ignore[call-arg]


def resolver(token: str = TOKEN) -> Resolver:
    return Resolver(
        company="acme", origin=SpecOrigin.REMOTE, secret=lambda name: token if name == "META_TOKEN" else None
    )


_open: list[MetaCatalogClient] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


@pytest.fixture()
def graph() -> Iterator[MetaGraphStandIn]:
    with MetaGraphStandIn(token=TOKEN, catalog=CATALOG) as standin:
        yield standin


def client(
    graph: MetaGraphStandIn, *, token: str = TOKEN, catalog: str = CATALOG, poll_timeout_s: float | None = None
) -> MetaCatalogClient:
    sync = MetaCatalogSync(to="meta-catalog", catalog=catalog, token="${secret:META_TOKEN}")
    local = settings().model_copy(update={"meta_graph_url": graph.url})
    made = client_for(sync, resolver(token), local, poll_first_s=0.01, poll_max_s=0.02, poll_timeout_s=poll_timeout_s)
    _open.append(made)
    return made


def test_an_operation_counts_as_its_request_in_the_batch_body() -> None:
    op = insert("a", title="Caffè ☕")  # UTF-8: the 28 MB are bytes, and non-ASCII text is not \u-escaped
    request = {"method": "UPDATE", "data": to_meta("a", op.item or {})}
    assert operation_bytes(op) == len(json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode())
    assert operation_bytes(op) < len(json.dumps(op.item)) + 64  # the engine's own estimate stays above it


def test_export_columns_map_to_meta_fields_and_google_only_ones_are_dropped() -> None:
    data = to_meta("k1", item("other-id", sale_price="15 eur", gender="Female", product_type=["A > B", "C"]))
    assert data["id"] == "k1"  # the ledger's key, not the column
    assert data["availability"] == "in stock"
    assert data["price"] == "19.90 EUR" and data["sale_price"] == "15.00 EUR"
    assert data["additional_image_link"] == ["https://shop.example.com/i/other-id-2.jpg"]
    assert data["gender"] == "female" and data["product_type"] == "A > B"
    assert "identifier_exists" not in data
    assert to_meta("k", {"color": None, "backorder": "x"}) == {"color": "", "id": "k"}  # "" unsets on Meta
    assert to_meta("k", {"additional_image_link": []})["additional_image_link"] == ""  # a list field too
    assert to_meta("k", {"availability": "backorder", "price": "abc"}) == {
        "availability": "available for order",
        "price": "abc",  # left for Meta to refuse that item with its own words
        "id": "k",
    }
    assert unmapped_columns(["id", "title", "identifier_exists", "tax"]) == ["identifier_exists", "tax"]


def test_inserts_go_as_upserting_updates_and_deletes_of_unknown_items_are_ok(graph: MetaGraphStandIn) -> None:
    c = client(graph)
    outcomes = c.send([insert("a"), insert("b"), delete("never-there")])
    assert [(o.key, o.ok) for o in outcomes] == [("a", True), ("b", True), ("never-there", True)]
    assert graph.items["a"]["price"] == "19.90 EUR" and graph.items["b"]["availability"] == "in stock"
    assert list(graph.sent()) == [("UPDATE", "a"), ("UPDATE", "b"), ("DELETE", "never-there")]
    (call,) = graph.calls("items_batch")
    body = json.loads(call.body)
    assert body["allow_upsert"] is True and body["item_type"] == "PRODUCT_ITEM"
    assert graph.versions == {GRAPH_VERSION}
    # the same operations again (after a kill or ChannelBusy) leave the catalog as it was
    assert all(o.ok for o in c.send([insert("a"), insert("b")]))
    assert set(graph.items) == {"a", "b"}
    assert all(o.ok for o in c.send([delete("a")])) and set(graph.items) == {"b"}


def test_a_batch_in_progress_is_polled_until_finished(graph: MetaGraphStandIn) -> None:
    graph.polls_in_progress = 3
    c = client(graph)
    assert all(o.ok for o in c.send([insert(str(i)) for i in range(20)]))
    assert len(graph.calls("check_batch_request_status")) == 4


def test_a_busy_answer_to_a_poll_is_waited_out_without_sending_the_batch_again(graph: MetaGraphStandIn) -> None:
    graph.polls_in_progress = 1
    graph.fail_next(2, status=503, edge="check_batch_request_status")
    assert all(o.ok for o in client(graph).send([insert("a"), insert("b")]))
    assert len(graph.calls("items_batch")) == 1
    assert [r.status for r in graph.calls("check_batch_request_status")] == [503, 503, 200, 200]


def test_a_batch_meta_never_finishes_is_busy_not_lost(graph: MetaGraphStandIn) -> None:
    graph.polls_in_progress = 1000
    c = client(graph, poll_timeout_s=0.1)
    with pytest.raises(ChannelBusy, match="still processing"):
        c.send([insert("slow")])


def test_per_item_errors_refuse_only_their_items(graph: MetaGraphStandIn) -> None:
    graph.refuse("c", "Image could not be downloaded")
    c = client(graph)
    no_price = Operation(key="b", op=Op.INSERT, item={k: v for k, v in item("b").items() if k != "price"})
    outcomes = {o.key: o for o in c.send([insert("a"), no_price, insert("c"), insert("d")])}
    assert outcomes["a"].ok and outcomes["d"].ok
    assert not outcomes["b"].ok and not outcomes["b"].retry and "price" in outcomes["b"].message
    assert outcomes["c"].code == "invalid_item" and outcomes["c"].message == "Image could not be downloaded"
    assert set(graph.items) == {"a", "d"}


def test_items_not_named_in_a_truncated_error_sample_are_sent_again() -> None:
    with MetaGraphStandIn(token=TOKEN, catalog=CATALOG, error_sample=1, report_invalid_ids=False) as graph:
        graph.refuse("x", "bad")
        graph.refuse("y", "bad too")
        outcomes = {o.key: o for o in client(graph).send([insert("x"), insert("y"), insert("z")])}
        assert not outcomes["x"].ok and not outcomes["x"].retry  # named: refused for good
        assert not outcomes["y"].ok and outcomes["y"].retry and outcomes["y"].code == "unconfirmed"
        assert outcomes["z"].retry  # nobody can tell whether z was taken: send it again
    with MetaGraphStandIn(token=TOKEN, catalog=CATALOG, final_status="error") as graph:
        assert all(o.retry for o in client(graph).send([insert("e")]))


def test_more_than_the_batch_limits_is_refused_before_anything_is_sent(graph: MetaGraphStandIn) -> None:
    c = client(graph)
    with pytest.raises(BatchTooLarge, match="at most 5000"):
        c.send([delete(str(i)) for i in range(MAX_BATCH + 1)])
    alone = insert("alone", description="x" * (28 * 1024 * 1024))
    with pytest.raises(BatchTooLarge, match="bytes"):
        c.send([alone, insert("small")])
    assert graph.requests == []
    (refused,) = c.send([alone])  # one item over the limit is its own refusal, never sent
    assert refused.code == "too_large" and not refused.ok
    assert graph.requests == []


def test_a_batch_meta_finds_too_large_is_sent_again_in_halves() -> None:
    with MetaGraphStandIn(token=TOKEN, catalog=CATALOG, max_bytes=3000) as graph:
        ops = [insert(k, description="d" * 900) for k in ("a", "b", "c")] + [insert("e", description="e" * 4000)]
        outcomes = {o.key: o for o in client(graph).send(ops)}
        assert [k for k, o in outcomes.items() if o.ok] == ["a", "b", "c"]
        assert outcomes["e"].code == "too_large" and not outcomes["e"].retry
        assert set(graph.items) == {"a", "b", "c"}
        # [a b c e] too large; [a b] taken; [c e] too large; [c] taken; [e] alone too large
        assert [r.status for r in graph.calls("items_batch")] == [500, 200, 500, 200, 500]


def test_rate_limits_and_server_errors_are_busy_and_take_nothing(graph: MetaGraphStandIn) -> None:
    c = client(graph)
    graph.rate_limit_next(1, code=80014, regain_minutes=3)
    with pytest.raises(ChannelBusy) as busy:
        c.send([insert("a")])
    assert busy.value.quota and busy.value.retry_after == 180.0 and "80014" in busy.value.message
    graph.rate_limit_next(1, code=4)
    with pytest.raises(ChannelBusy) as app_limit:
        c.send([insert("a")])
    assert app_limit.value.quota
    graph.fail_next(1, status=503)
    with pytest.raises(ChannelBusy) as down:
        c.send([insert("a")])
    assert not down.value.quota and "503" in down.value.message
    assert graph.items == {}
    assert c.send([insert("a")])[0].ok


def test_a_refused_token_or_an_unknown_catalog_stops_the_sync(graph: MetaGraphStandIn) -> None:
    with pytest.raises(ChannelDown, match="code 190"):
        client(graph, token="EAAG-not-the-token").send([insert("a")])
    with pytest.raises(ChannelDown, match="catalog 999"):
        client(graph, catalog="999").send([insert("a")])
    sync = MetaCatalogSync(to="meta-catalog", catalog=CATALOG, token="${secret:NOT_SET}")
    with pytest.raises(ChannelDown, match=r"\$\{secret:NOT_SET\}"):
        client_for(sync, resolver(), settings())


def test_list_items_pages_through_the_catalog_in_export_names(graph: MetaGraphStandIn) -> None:
    c = client(graph)
    sent = [insert(f"p{i:04d}", price="1234.5 USD") for i in range(1100)]
    assert all(o.ok for o in c.send(sent))
    graph.set_errors(
        "p0001",
        [{"title": "Image too small", "description": "Use 500x500", "error_type": "IMAGE", "error_priority": "HIGH"}],
    )
    listed = list(c.list_items())
    assert [r.key for r in listed] == [op.key for op in sent]
    assert len(graph.calls("products")) == 3  # 500 a page
    first = listed[0]
    assert first.item["price"] == "1234.50 USD"  # read back as "$1,234.50" with currency USD
    assert first.item == comparable(sent[0].item or {})  # what repair compares: equal when nothing changed
    assert first.key == "p0000" and "id" not in first.item  # the retailer id is the key, never compared
    assert listed[1].issues[0].code == "IMAGE" and listed[1].issues[0].severity == "error"
    graph.edit("p0002", title="Changed behind FireFeed's back")
    changed = next(r for r in c.list_items() if r.key == "p0002")
    assert changed.item != comparable(sent[2].item or {})


def test_the_token_never_shows_in_urls_errors_or_logs(
    graph: MetaGraphStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    c = client(graph)
    graph.fail_next(1, status=500, message=f"upstream quoted access_token={TOKEN}")
    with pytest.raises(ChannelBusy) as busy:
        c.send([insert("a")])
    assert TOKEN not in str(busy.value) and "${secret:META_TOKEN}" in str(busy.value)
    assert busy.value.__cause__ is None
    assert c.send([insert("a")])[0].ok and list(c.list_items())
    graph.stop()
    gone = client(graph)
    with pytest.raises(ChannelBusy, match="could not be reached") as unreachable:
        gone.send([insert("b")])
    assert TOKEN not in str(unreachable.value)
    assert all(TOKEN not in r.path and TOKEN not in json.dumps(r.query) for r in graph.requests)
    assert all(TOKEN not in r.body.decode() for r in graph.requests)
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in graph.requests)
    assert TOKEN not in caplog.text and "meta catalog" in caplog.text


def test_a_products_giant_list_of_errors_is_cut_before_the_ledger() -> None:
    # The catalog's errors of a product are stored per item in the ledger and shown: bounded whatever Meta answers.
    errors = [{"error_type": "t" * 10_000, "description": "d" * 100_000, "error_priority": "HIGH"}] * 5_000
    item = remote_item({"retailer_id": "A", "errors": errors})
    assert len(item.issues) == 50 and all(len(i.code) <= 100 and len(i.message) <= 1000 for i in item.issues)


def test_an_unreadable_sale_price_is_left_out_unset_on_the_catalog_and_the_item_sent(graph: MetaGraphStandIn) -> None:
    """Meta refuses the whole item for a sale price it cannot read: it is sent as "" (an UPDATE keeps a field it
    is not given, so an old sale price would stay live) and named; an unreadable price still goes as it is, for
    Meta to refuse the item (#51)."""
    c = client(graph)
    assert all(o.ok for o in c.send([insert("s1", sale_price="15 EUR")]))
    assert graph.items["s1"]["sale_price"] == "15.00 EUR"
    [outcome] = c.send([insert("s1", sale_price="on sale!")])
    assert outcome.ok and [column for column, _ in outcome.left_out] == ["sale_price"]
    assert "'on sale!'" in outcome.left_out[0][1]
    assert "sale_price" not in graph.items["s1"]
    [refused] = c.send([insert("s2", price="cheap")])
    assert not refused.ok and refused.left_out == ()
    assert comparable(item("s1", sale_price="on sale!")) == comparable(item("s1"))
