"""A local stand-in for Meta's Graph API catalog batch endpoints, for the sync tests (SPEC 10 C10, #51).

It speaks the published contract of the Marketing API's Catalog Batch API, as documented at
https://developers.facebook.com/docs/marketing-api/catalog-batch/guides/send-product-updates and the
reference pages of `items_batch`, `check_batch_request_status` and the catalog's `products` edge:

- `POST /{version}/{catalog_id}/items_batch` with `item_type=PRODUCT_ITEM`, `allow_upsert`, and
  `requests=[{"method": "CREATE"|"UPDATE"|"DELETE", "data": {"id": ..., "title": ..., ...}}]` (a JSON
  body, or a form body whose `requests` is JSON text, as the Graph SDKs send it) answers
  `{"handles": ["..."], "validation_status": [...]}`. At most 5,000 requests and 28 MB a call; over
  either, the Graph error the real API answers (code 100 for the count; code 1 "Please reduce the
  amount of data you're asking for" for the bytes).
- `GET /{version}/{catalog_id}/check_batch_request_status?handle=...` answers
  `{"data": [{"handle", "status": "in_progress"|"finished", "errors": [{"line", "id", "message"}],
  "errors_total_count", "warnings", "warnings_total_count", "ids_of_invalid_requests"?}]}`; `errors` is
  a sample (`error_sample` entries, like the real one's "does not include all errors"), and
  `ids_of_invalid_requests` is there when asked for with `load_ids_of_invalid_requests=true`.
- `GET /{version}/{catalog_id}/products?fields=...&limit=...&after=...` pages through what it holds in
  the Graph's ProductItem field names (retailer_id, name, url, image_url, a formatted price and its
  currency, errors, ...), with `paging.cursors` and a `next` URL while more remain.

The access token is read where the Graph reads it: the `access_token` parameter (query or body) or an
`Authorization: Bearer|OAuth` header. A wrong one is the Graph's OAuthException code 190, a missing
one code 104, another catalog id code 100 subcode 33. Errors are always `{"error": {"message", "type",
"code", "error_subcode"?, "fbtrace_id"}}`.

For the tests: a batch stays `in_progress` for `polls_in_progress` status calls; `fail_next(n)`
answers the next n calls with a 503; `rate_limit_next(n, code=80014|4|17)` with the Graph's rate-limit
error and its `X-Business-Use-Case-Usage` header; `calls_per_window` refuses items_batch calls over a
budget per `window_s` the same way; `refuse(id, message)` fails one item of any batch; `edit(id, ...)`
changes a product behind the sender's back; `set_errors(id, [...])` sets what the list says is wrong
with it; `requests` records every call and `items` holds the catalog. An item CREATEd (or UPDATEd into
existence) must carry the catalog's required fields, and a price must read `<number> <ISO 4217>`: a
missing or malformed one is an error for that item only, as is a field a product item does not take
(`FIELDS`). Changes are applied when the call is taken
(as the real API ingests them): polling only reports on them.

Run it as a process with `python -m tests.standins.meta_graph --port 0 --token T --catalog C`: it prints
its URL on the first line and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

MAX_REQUESTS = 5000
MAX_BYTES = 28 * 1024 * 1024
#: What the catalog needs of a new product item (Meta's required fields for PRODUCT_ITEM).
REQUIRED = ("id", "title", "description", "availability", "condition", "price", "link", "image_link", "brand")
AVAILABILITY = frozenset({"in stock", "out of stock", "preorder", "available for order", "discontinued"})
CONDITION = frozenset({"new", "refurbished", "used"})
#: The fields a PRODUCT_ITEM takes (the catalog's product fields; Meta refuses the item for any other, so a
#: Google-only attribute such as identifier_exists, shipping_label or multipack is refused here too).
FIELDS = frozenset(
    {
        *REQUIRED,
        "additional_image_link",
        "additional_variant_attribute",
        "age_group",
        "applink",
        "color",
        "commerce_tax_category",
        "expiration_date",
        "fb_product_category",
        "gender",
        "google_product_category",
        "gtin",
        "importer_address",
        "importer_name",
        "internal_label",
        "inventory",
        "item_group_id",
        "manufacturer_info",
        "material",
        "mobile_link",
        "mpn",
        "origin_country",
        "pattern",
        "product_tags",
        "product_type",
        "quantity_to_sell_on_facebook",
        "return_policy_info",
        "rich_text_description",
        "sale_price",
        "sale_price_effective_date",
        "shipping",
        "shipping_weight",
        "short_description",
        "size",
        "status",
        "unit_price",
        "video",
        "visibility",
        *(f"custom_label_{i}" for i in range(5)),
        *(f"custom_number_{i}" for i in range(5)),
    }
)
_PRICE = re.compile(r"^(\d+(?:\.\d+)?) ([A-Z]{3})$")
_PATH = re.compile(r"^/(v\d+\.\d+)/([^/]+)/(items_batch|check_batch_request_status|products)$")
_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}
#: ProductItem field (what a GET answers) -> feed field (what items_batch takes).
READ_FIELDS = {
    "retailer_id": "id",
    "name": "title",
    "description": "description",
    "availability": "availability",
    "condition": "condition",
    "url": "link",
    "image_url": "image_link",
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
    "custom_label_0": "custom_label_0",
    "custom_label_1": "custom_label_1",
    "custom_label_2": "custom_label_2",
    "custom_label_3": "custom_label_3",
    "custom_label_4": "custom_label_4",
}
RATE_LIMIT_MESSAGES = {
    4: "(#4) Application request limit reached",
    17: "(#17) User request limit reached",
    80014: (
        "(#80014) There have been too many calls for the batch uploads to this catalog account. Wait a bit and "
        "try again. For more info, please refer to https://developers.facebook.com/docs/graph-api/overview/"
        "rate-limiting#catalog."
    ),
}


@dataclass
class Recorded:
    """One call as the stand-in received it (the token stays in `query`/`body` as sent: tests look for it)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    status: int = 0
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Batch:
    handle: str
    polls_left: int
    errors: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    invalid_ids: list[str]
    retailer_ids: list[str]


class GraphError(Exception):
    def __init__(self, status: int, code: int, message: str, subcode: int | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.subcode, self.extra = status, code, message, subcode, extra
        self.headers: dict[str, str] = {}

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"message": self.message, "type": "OAuthException", "code": self.code}
        if self.subcode is not None:
            err["error_subcode"] = self.subcode
        err.update(self.extra)
        err["fbtrace_id"] = "A" + secrets.token_hex(8)
        return {"error": err}


class MetaGraphStandIn:
    """The Graph API's catalog batch endpoints for one catalog, served on 127.0.0.1 from a thread."""

    def __init__(
        self,
        *,
        token: str = "meta-test-token",
        catalog: str = "1234567890",
        port: int = 0,
        polls_in_progress: int = 0,
        error_sample: int = 100,
        max_requests: int = MAX_REQUESTS,
        max_bytes: int = MAX_BYTES,
        calls_per_window: int | None = None,
        window_s: float = 3600.0,
        latency_s: float = 0.0,
        final_status: str = "finished",
        report_invalid_ids: bool = True,
    ) -> None:
        self.token = token
        self.catalog = catalog
        self.polls_in_progress = polls_in_progress
        self.error_sample = error_sample
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.calls_per_window = calls_per_window
        self.window_s = window_s
        self.latency_s = latency_s
        self.final_status = final_status  # "error" or "canceled": a batch Meta gave up on
        self.report_invalid_ids = report_invalid_ids  # False: only the sample of errors names refused items
        self.items: dict[str, dict[str, Any]] = {}  # retailer id -> fields as items_batch took them
        self.fbids: dict[str, str] = {}  # retailer id -> the Graph id of its product item
        self.item_errors: dict[str, list[dict[str, Any]]] = {}  # retailer id -> ProductItem.errors
        self.requests: list[Recorded] = []
        self.versions: set[str] = set()
        self._refused: dict[str, str] = {}
        self._batches: dict[str, _Batch] = {}
        self._faults: list[tuple[str | None, GraphError]] = []  # (the edge it is for, None: any), the error
        self._batch_calls: list[float] = []
        self._lock = threading.RLock()
        self._next_fbid = 7_000_000_000_000_000
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- life ------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MetaGraphStandIn:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="meta-graph-standin", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> MetaGraphStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a test sets or reads -----------------------------------------------------------------
    def fail_next(
        self,
        n: int = 1,
        status: int = 503,
        message: str = "An unexpected error has occurred. Please retry your request later.",
        edge: str | None = None,
    ) -> None:
        """The next `n` calls (to `edge` only, when given) answer `status` with the Graph's transient error."""
        with self._lock:
            for _ in range(n):
                self._faults.append((edge, GraphError(status, 2, message, is_transient=True)))

    def rate_limit_next(self, n: int = 1, code: int = 80014, regain_minutes: int = 1, edge: str | None = None) -> None:
        """The next `n` calls (to `edge` only, when given) are refused as over a rate limit (4 app, 17 user,
        80014 catalog batch)."""
        with self._lock:
            for _ in range(n):
                self._faults.append((edge, self._rate_limited(code, regain_minutes)))

    def refuse(self, retailer_id: str, message: str) -> None:
        """Every later create/update of this item fails with `message` (an error for that item only)."""
        with self._lock:
            self._refused[retailer_id] = message

    def edit(self, retailer_id: str, **fields: Any) -> None:
        """Change a product behind the sender's back (feed field names: title=, price=...)."""
        with self._lock:
            self.items[retailer_id].update(fields)

    def put(self, retailer_id: str, **fields: Any) -> None:
        """Add a product behind the sender's back (a feed or Commerce Manager did): an orphan to FireFeed."""
        with self._lock:
            self.items[retailer_id] = {"id": retailer_id, **fields}
            self._next_fbid += 1
            self.fbids.setdefault(retailer_id, str(self._next_fbid))

    def set_errors(self, retailer_id: str, errors: list[dict[str, Any]]) -> None:
        """What the products list says is wrong with an item: [{title, description, error_type, error_priority}]."""
        with self._lock:
            self.item_errors[retailer_id] = errors

    def calls(self, kind: str) -> list[Recorded]:
        """The recorded calls to one edge: "items_batch", "check_batch_request_status" or "products"."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/" + kind)]

    def sent(self) -> Iterator[tuple[str, str]]:
        """(method, retailer id) of every request in every items_batch call taken, in order."""
        with self._lock:
            calls = [r for r in self.requests if r.path.endswith("/items_batch") and r.status == 200]
        for r in calls:
            for one in _batch_params(r)["requests"]:
                yield str(one.get("method", "")).upper(), str((one.get("data") or {}).get("id", ""))

    # -- the server ----------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body are two writes: without this a delayed ACK holds each answer ~40 ms
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                standin._serve(self, "GET")

            def do_POST(self) -> None:
                standin._serve(self, "POST")

            def do_DELETE(self) -> None:
                standin._serve(self, "DELETE")

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the record is the log
                pass

        return Handler

    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        over = length > self.max_bytes
        body = _drain(h, length) if over else h.rfile.read(length)
        rec = Recorded(method, parts.path, parse_qs(parts.query), {k.lower(): v for k, v in h.headers.items()}, body)
        with self._lock:
            self.requests.append(rec)
        if self.latency_s:
            time.sleep(self.latency_s)
        try:
            status, answer, headers = self._answer(h, rec, over)
        except GraphError as err:
            status, answer, headers = err.status, err.body(), err.headers
        rec.status = status
        data = json.dumps(answer).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=UTF-8")
        h.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(data)

    def _answer(self, h: BaseHTTPRequestHandler, rec: Recorded, over: bool) -> tuple[int, Any, dict[str, str]]:
        found = _PATH.match(rec.path)
        if found is None:
            raise GraphError(400, 100, f"Unknown path components: {rec.path}")
        version, catalog, edge = found.groups()
        if over:  # the Graph refuses a body over its limit before reading what it says
            raise GraphError(500, 1, "Please reduce the amount of data you're asking for, then retry your request")
        params = _batch_params(rec) if rec.method == "POST" else {}
        self._check_token(rec, params)
        with self._lock:
            self.versions.add(version)
            for i, (only, fault) in enumerate(self._faults):
                if only in (None, edge):
                    del self._faults[i]
                    raise fault
        if catalog != self.catalog:
            raise GraphError(
                400,
                100,
                f"Unsupported {rec.method.lower()} request. Object with ID '{catalog}' does not exist, cannot be "
                "loaded due to missing permissions, or does not support this operation.",
                subcode=33,
            )
        if edge == "items_batch" and rec.method == "POST":
            return 200, self._items_batch(params), {}
        if edge == "check_batch_request_status" and rec.method == "GET":
            return 200, self._status(rec.query), {}
        if edge == "products" and rec.method == "GET":
            return 200, self._products(rec), {}
        raise GraphError(400, 100, f"Unsupported {rec.method.lower()} request.")

    def _check_token(self, rec: Recorded, params: dict[str, Any]) -> None:
        given = None
        auth = rec.headers.get("authorization", "")
        if auth.split(" ", 1)[0].lower() in ("bearer", "oauth") and " " in auth:
            given = auth.split(" ", 1)[1].strip()
        given = given or (rec.query.get("access_token") or [""])[0] or params.get("access_token")
        if not given:
            raise GraphError(400, 104, "An access token is required to request this resource.")
        if not secrets.compare_digest(str(given).encode(), self.token.encode()):
            raise GraphError(400, 190, "Invalid OAuth access token - Cannot parse access token")

    def _rate_limited(self, code: int, regain_minutes: int) -> GraphError:
        err = GraphError(400, code, RATE_LIMIT_MESSAGES.get(code, f"(#{code}) Rate limit reached"), is_transient=True)
        usage = {
            self.catalog: [
                {
                    "type": "catalog_batch",
                    "call_count": 100,
                    "total_cputime": 10,
                    "total_time": 10,
                    "estimated_time_to_regain_access": regain_minutes,
                }
            ]
        }
        err.headers = {"X-Business-Use-Case-Usage": json.dumps(usage)}
        return err

    # -- the edges -----------------------------------------------------------------------------
    def _items_batch(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("item_type") != "PRODUCT_ITEM":
            raise GraphError(400, 100, "(#100) Param item_type must be one of {PRODUCT_ITEM, ...}")
        requests = params.get("requests")
        if not isinstance(requests, list) or not requests:
            raise GraphError(400, 100, "(#100) The parameter requests is required")
        if len(requests) > self.max_requests:
            raise GraphError(
                400, 100, f"(#100) Param requests must be an array with at most {self.max_requests} elements"
            )
        upsert = str(params.get("allow_upsert", "true")).lower() not in ("false", "0")
        with self._lock:
            if self.calls_per_window is not None:
                now = time.monotonic()
                self._batch_calls = [t for t in self._batch_calls if now - t < self.window_s]
                if len(self._batch_calls) >= self.calls_per_window:
                    raise self._rate_limited(80014, max(1, int(self.window_s // 60)))
                self._batch_calls.append(now)
            errors: list[dict[str, Any]] = []
            ids: list[str] = []
            for line, one in enumerate(requests, start=1):
                data = one.get("data") if isinstance(one, dict) else None
                rid = str((data or {}).get("id", "")) if isinstance(data, dict) else ""
                ids.append(rid)
                problem = self._apply(str(one.get("method", "")).upper() if isinstance(one, dict) else "", data, upsert)
                if problem:
                    errors.append({"line": line, "id": rid, "message": problem})
            handle = "AC" + secrets.token_urlsafe(18)
            invalid = list(dict.fromkeys(e["id"] for e in errors))
            self._batches[handle] = _Batch(handle, self.polls_in_progress, errors, [], invalid, ids)
        return {"handles": [handle], "validation_status": []}

    def _apply(self, method: str, data: Any, upsert: bool) -> str:
        """Apply one request; the error message for this item, or "" when it was taken."""
        if not isinstance(data, dict) or not str(data.get("id", "")).strip():
            return "The id field is required"
        rid = str(data["id"])
        if method == "DELETE":
            self.items.pop(rid, None)  # deleting an item the catalog does not hold is not an error
            self.item_errors.pop(rid, None)
            return ""
        if method not in ("CREATE", "UPDATE"):
            return f"Invalid method: {method or '(none)'}; use CREATE, UPDATE or DELETE"
        if rid in self._refused:
            return self._refused[rid]
        exists = rid in self.items
        if method == "CREATE" and exists:
            return f"An item with id {rid} already exists in this catalog"
        if method == "UPDATE" and not exists and not upsert:
            return f"Item with id {rid} does not exist in this catalog (allow_upsert is false)"
        unknown = sorted(set(data) - FIELDS)
        if unknown:
            return f"Invalid field(s) for a product item: {', '.join(unknown)}"
        # UPDATE changes the fields it names ("" unsets an optional one); a new item needs them all
        merged = {**self.items.get(rid, {}), **{k: v for k, v in data.items() if v is not None}}
        for name in REQUIRED:
            if merged.get(name) in (None, "", []):
                return f"Missing required field: {name}"
        for name in ("price", "sale_price"):
            value = merged.get(name)
            if value not in (None, "") and not _PRICE.match(str(value)):
                return f"Invalid value for {name}: {value!r}; use a number and an ISO 4217 code, e.g. 9.99 USD"
        if str(merged["availability"]).lower() not in AVAILABILITY:
            return f"Invalid availability: {merged['availability']!r}"
        if str(merged["condition"]).lower() not in CONDITION:
            return f"Invalid condition: {merged['condition']!r}"
        self.items[rid] = {k: v for k, v in merged.items() if v != ""}
        if rid not in self.fbids:
            self._next_fbid += 1
            self.fbids[rid] = str(self._next_fbid)
        return ""

    def _status(self, query: dict[str, list[str]]) -> dict[str, Any]:
        handle = (query.get("handle") or [""])[0]
        with self._lock:
            batch = self._batches.get(handle)
            if batch is None:
                raise GraphError(400, 100, "(#100) Invalid handle")
            if batch.polls_left > 0:
                batch.polls_left -= 1
                return {
                    "data": [
                        {
                            "handle": handle,
                            "status": "in_progress",
                            "errors": [],
                            "errors_total_count": 0,
                            "warnings": [],
                            "warnings_total_count": 0,
                        }
                    ]
                }
            out: dict[str, Any] = {
                "handle": handle,
                "status": self.final_status,
                "errors": batch.errors[: self.error_sample],
                "errors_total_count": len(batch.errors),
                "warnings": batch.warnings[: self.error_sample],
                "warnings_total_count": len(batch.warnings),
            }
        asked = (query.get("load_ids_of_invalid_requests") or ["false"])[0].lower() in ("true", "1")
        if asked and self.report_invalid_ids:
            out["ids_of_invalid_requests"] = batch.invalid_ids
        return {"data": [out]}

    def _products(self, rec: Recorded) -> dict[str, Any]:
        fields = [f for f in (rec.query.get("fields") or ["id,retailer_id"])[0].split(",") if f]
        limit = max(1, min(int((rec.query.get("limit") or ["25"])[0]), 5000))
        after = (rec.query.get("after") or [""])[0]
        with self._lock:
            keys = sorted(self.items)
            start = 0
            if after:
                try:
                    start = keys.index(base64.urlsafe_b64decode(after.encode()).decode()) + 1
                except (ValueError, UnicodeDecodeError):
                    raise GraphError(400, 100, "(#100) Invalid cursor") from None
            page = keys[start : start + limit]
            data = [self._product(rid, fields) for rid in page]
        answer: dict[str, Any] = {"data": data}
        if page:
            cursors = {"before": _cursor(page[0]), "after": _cursor(page[-1])}
            answer["paging"] = {"cursors": cursors}
            if start + limit < len(keys):
                query = {k: v[0] for k, v in rec.query.items()}
                query["after"] = cursors["after"]
                answer["paging"]["next"] = f"{self.url}{rec.path}?{urlencode(query)}"
        return answer

    def _product(self, rid: str, fields: list[str]) -> dict[str, Any]:
        item = self.items[rid]
        full: dict[str, Any] = {"id": self.fbids[rid]}
        for read, feed in READ_FIELDS.items():
            if item.get(feed) not in (None, ""):
                full[read] = item[feed]
        for name in ("price", "sale_price"):
            found = _PRICE.match(str(item.get(name, "")))
            if found:
                full[name] = _formatted(found.group(1), found.group(2))
                full["currency"] = found.group(2)
        extra = item.get("additional_image_link")
        if extra:
            full["additional_image_urls"] = extra if isinstance(extra, list) else str(extra).split(",")
        full["errors"] = self.item_errors.get(rid, [])
        full["review_status"] = "rejected" if full["errors"] else "approved"
        return {k: full[k] for k in ["id", *fields] if k in full}


def _batch_params(rec: Recorded) -> dict[str, Any]:
    """The parameters of a POST: a JSON body, or a form whose `requests` is JSON text."""
    if not rec.body:
        return {k: v[0] for k, v in rec.query.items()}
    ctype = rec.headers.get("content-type", "")
    if "json" in ctype:
        try:
            params = json.loads(rec.body)
        except ValueError:
            raise GraphError(400, 100, "(#100) The request body is not valid JSON") from None
        return params if isinstance(params, dict) else {}
    params = {k: v[0] for k, v in parse_qs(rec.body.decode("utf-8", "replace")).items()}
    if isinstance(params.get("requests"), str):
        try:
            params["requests"] = json.loads(params["requests"])
        except ValueError:
            raise GraphError(400, 100, "(#100) Param requests must be a JSON array") from None
    return params


def _drain(h: BaseHTTPRequestHandler, length: int) -> bytes:
    """Read and drop a body over the limit (the connection stays usable); nothing is kept."""
    while length > 0:
        chunk = h.rfile.read(min(length, 1 << 20))
        if not chunk:
            break
        length -= len(chunk)
    return b""


def _cursor(rid: str) -> str:
    return base64.urlsafe_b64encode(rid.encode()).decode()


def _formatted(amount: str, currency: str) -> str:
    """A price as the Graph reads it back: formatted for display (en_US), not the "9.99 USD" it took."""
    number = f"{float(amount):,.2f}"
    symbol = _SYMBOLS.get(currency)
    return f"{symbol}{number}" if symbol else f"{currency}{number}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="meta-test-token")
    parser.add_argument("--catalog", default="1234567890")
    parser.add_argument("--polls-in-progress", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each answer waits")
    parser.add_argument("--calls-per-window", type=int, default=None)
    parser.add_argument("--window", type=float, default=3600.0)
    args = parser.parse_args(argv)
    standin = MetaGraphStandIn(
        token=args.token,
        catalog=args.catalog,
        port=args.port,
        polls_in_progress=args.polls_in_progress,
        latency_s=args.latency,
        calls_per_window=args.calls_per_window,
        window_s=args.window,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    standin.start()
    print(standin.url, flush=True)
    done.wait()
    standin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
