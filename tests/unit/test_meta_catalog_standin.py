"""The Graph API stand-in answers as the published catalog batch contract says (what the client is tested on)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.standins.meta_graph import MetaGraphStandIn

#: one client for the module: a new one per call builds a TLS context each time (~30 ms of CPU)
HTTP = httpx.Client(trust_env=False)
TOKEN = "standin-token"
CATALOG = "555"


def product(rid: str, **over: Any) -> dict[str, Any]:
    item = {
        "id": rid,
        "title": f"Item {rid}",
        "description": "A thing",
        "availability": "in stock",
        "condition": "new",
        "price": "12.34 EUR",
        "link": f"https://shop.example.com/{rid}",
        "image_link": f"https://shop.example.com/{rid}.jpg",
        "brand": "Acme",
    }
    item.update(over)
    return item


@pytest.fixture(scope="module", autouse=True)
def _close_http() -> Iterator[None]:
    yield
    HTTP.close()


@pytest.fixture()
def graph() -> Iterator[MetaGraphStandIn]:
    with MetaGraphStandIn(token=TOKEN, catalog=CATALOG) as standin:
        yield standin


def batch(graph: MetaGraphStandIn, requests: list[dict[str, Any]], **params: Any) -> httpx.Response:
    body = {"item_type": "PRODUCT_ITEM", "allow_upsert": True, "requests": requests, **params}
    return HTTP.post(
        f"{graph.url}/v25.0/{CATALOG}/items_batch", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
    )


def status(graph: MetaGraphStandIn, handle: str) -> dict[str, Any]:
    answer = HTTP.get(
        f"{graph.url}/v25.0/{CATALOG}/check_batch_request_status",
        params={"handle": handle, "access_token": TOKEN, "load_ids_of_invalid_requests": "true"},
    )
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()["data"][0]
    return data


def test_a_batch_is_taken_with_a_handle_and_its_bad_item_alone_is_an_error(graph: MetaGraphStandIn) -> None:
    graph.polls_in_progress = 2
    answer = batch(
        graph,
        [
            {"method": "UPDATE", "data": product("a")},
            {"method": "UPDATE", "data": {k: v for k, v in product("b").items() if k != "price"}},
            {"method": "DELETE", "data": {"id": "never-there"}},
        ],
    )
    assert answer.status_code == 200, answer.text
    handle = answer.json()["handles"][0]
    assert [status(graph, handle)["status"] for _ in range(2)] == ["in_progress", "in_progress"]
    done = status(graph, handle)
    assert done["status"] == "finished"
    assert done["errors"] == [{"line": 2, "id": "b", "message": "Missing required field: price"}]
    assert done["errors_total_count"] == 1 and done["ids_of_invalid_requests"] == ["b"]
    assert set(graph.items) == {"a"}
    assert list(graph.sent()) == [("UPDATE", "a"), ("UPDATE", "b"), ("DELETE", "never-there")]


def test_a_field_a_product_item_does_not_take_is_that_items_error(graph: MetaGraphStandIn) -> None:
    """Google-only attributes, and the ProductItem names a GET answers, are not items_batch fields."""
    answer = batch(
        graph,
        [
            {"method": "UPDATE", "data": {**product("g"), "identifier_exists": "no"}},
            {"method": "UPDATE", "data": {**product("h"), "retailer_id": "h", "name": "Hat"}},
            {"method": "UPDATE", "data": {**product("i"), "custom_label_0": "summer", "gtin": "4006381333931"}},
        ],
    )
    done = status(graph, answer.json()["handles"][0])
    assert done["errors"] == [
        {"line": 1, "id": "g", "message": "Invalid field(s) for a product item: identifier_exists"},
        {"line": 2, "id": "h", "message": "Invalid field(s) for a product item: name, retailer_id"},
    ]
    assert set(graph.items) == {"i"}


def test_the_token_is_checked_wherever_it_is_given(graph: MetaGraphStandIn) -> None:
    url = f"{graph.url}/v25.0/{CATALOG}/products"
    assert HTTP.get(url, params={"access_token": TOKEN}).status_code == 200
    assert HTTP.get(url, headers={"Authorization": f"OAuth {TOKEN}"}).status_code == 200
    wrong = HTTP.get(url, params={"access_token": "nope"})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == 190
    assert HTTP.get(url).json()["error"]["code"] == 104
    other = HTTP.get(f"{graph.url}/v25.0/999/products", params={"access_token": TOKEN}).json()["error"]
    assert (other["code"], other["error_subcode"]) == (100, 33)


def test_a_form_body_with_requests_as_json_text_is_taken_too(graph: MetaGraphStandIn) -> None:
    form = {
        "access_token": TOKEN,
        "item_type": "PRODUCT_ITEM",
        "requests": json.dumps([{"method": "CREATE", "data": product("f")}]),
    }
    answer = HTTP.post(f"{graph.url}/v25.0/{CATALOG}/items_batch", data=form)
    assert answer.status_code == 200, answer.text
    assert "f" in graph.items


def test_more_items_or_bytes_than_the_limits_are_refused_with_the_graph_errors() -> None:
    with MetaGraphStandIn(token=TOKEN, catalog=CATALOG, max_requests=3, max_bytes=4000) as graph:
        many = batch(graph, [{"method": "UPDATE", "data": product(str(i))} for i in range(4)])
        assert many.status_code == 400 and many.json()["error"]["code"] == 100
        big = batch(graph, [{"method": "UPDATE", "data": product("x", description="d" * 5000)}])
        assert big.status_code == 500
        assert big.json()["error"]["code"] == 1 and "reduce the amount of data" in big.json()["error"]["message"]
        assert graph.items == {}


def test_faults_and_rate_limits_answer_with_the_graph_error_bodies(graph: MetaGraphStandIn) -> None:
    graph.fail_next(1)
    graph.rate_limit_next(1, code=80014, regain_minutes=3)
    first = batch(graph, [{"method": "UPDATE", "data": product("a")}])
    assert first.status_code == 503 and first.json()["error"]["is_transient"] is True
    second = batch(graph, [{"method": "UPDATE", "data": product("a")}])
    assert second.json()["error"]["code"] == 80014
    usage = json.loads(second.headers["X-Business-Use-Case-Usage"])
    assert usage[CATALOG][0]["estimated_time_to_regain_access"] == 3
    assert batch(graph, [{"method": "UPDATE", "data": product("a")}]).status_code == 200
    graph.calls_per_window = 1
    assert batch(graph, [{"method": "UPDATE", "data": product("b")}]).status_code == 200
    assert batch(graph, [{"method": "UPDATE", "data": product("c")}]).json()["error"]["code"] == 80014


def test_the_products_edge_pages_with_cursors_in_product_item_names(graph: MetaGraphStandIn) -> None:
    batch(graph, [{"method": "UPDATE", "data": product(f"p{i}", mpn=f"M{i}")} for i in range(5)])
    graph.set_errors("p1", [{"title": "Image too small", "description": "...", "error_type": "IMAGE"}])
    seen: list[dict[str, Any]] = []
    params = {"fields": "retailer_id,name,price,currency,manufacturer_part_number,errors", "limit": "2"}
    after = ""
    for _ in range(5):
        answer = HTTP.get(
            f"{graph.url}/v25.0/{CATALOG}/products",
            params={**params, **({"after": after} if after else {})},
            headers={"Authorization": f"Bearer {TOKEN}"},
        ).json()
        seen += answer["data"]
        if "next" not in answer.get("paging", {}):
            break
        after = answer["paging"]["cursors"]["after"]
    assert [p["retailer_id"] for p in seen] == ["p0", "p1", "p2", "p3", "p4"]
    assert seen[0]["price"] == "€12.34" and seen[0]["currency"] == "EUR" and seen[0]["manufacturer_part_number"] == "M0"
    assert seen[1]["errors"][0]["title"] == "Image too small"


def test_it_runs_as_a_process_and_prints_its_url() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.standins.meta_graph", "--token", TOKEN, "--catalog", CATALOG],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        answer = HTTP.get(f"{url}/v25.0/{CATALOG}/products", params={"access_token": TOKEN})
        assert answer.json() == {"data": []}
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
