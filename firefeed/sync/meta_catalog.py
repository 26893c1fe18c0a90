"""The `meta-catalog` channel client: a Meta catalog kept up to date through the Graph API's catalog batch
endpoints (SPEC 10 C9-C10), with plain httpx.

The issue allowed `facebook-business` or plain HTTP. Plain HTTP it is: three calls are all the sync needs
(`POST /{catalog}/items_batch`, `GET /{catalog}/check_batch_request_status`, `GET /{catalog}/products`), and
`facebook-business` (25.0) would bring requests, aiohttp, pycountry, curlify, six and capi-param-builder and
about 1,000 generated modules into every worker, keeps its token in a process-wide default API object unless
each call is handed its own (a worker syncs many companies' catalogs), and sends the token as a query
parameter of every URL (its session's `params`), where the HTTP libraries' logs and errors print it.

One `send` is one items_batch call of at most 5,000 requests and 28 MB, then the handle it answers is polled
(with backoff, for a bounded time) until Meta has processed it; the per-item errors of the finished batch
become refused outcomes, every other operation is ok. Inserts are sent as `UPDATE` with `allow_upsert`:
`CREATE` fails for an item the catalog already holds (after a killed worker's batch was taken, or when a feed
made it), while an UPDATE that creates what is missing is idempotent, so sending the same operations again
(what the engine does after ChannelBusy or a kill) leaves the catalog the same. An UPDATE changes only the
fields it names, so every mapped field is sent, an empty one as "" (Meta's way to unset a field).

The access token travels in the `Authorization` header, never in a URL, and every message this module raises
or logs passes through the Resolver that expanded it, which puts `${secret:NAME}` back where the value was.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx

from firefeed.errors import FireFeedError
from firefeed.pipeline._netguard import GuardedTransport, tls_context
from firefeed.sync._meta_fields import (
    FIELDS,
    READ_FIELDS,
    comparable,
    remote_item,
    to_meta,
    to_meta_checked,
    unmapped_columns,
)
from firefeed.sync.channel import (
    ChannelBusy,
    ChannelDown,
    Limits,
    Op,
    Operation,
    Outcome,
    RemoteItem,
)

if TYPE_CHECKING:
    from firefeed.config import Settings
    from firefeed.secrets.references import Resolver
    from firefeed.spec.sync import MetaCatalogSync

__all__ = [
    "FIELDS",
    "LIMITS",
    "BatchTooLarge",
    "MetaCatalogClient",
    "client_for",
    "columns_not_sent",
    "comparable",
    "operation_bytes",
    "to_meta",
    "unmapped_columns",
]
log = logging.getLogger(__name__)

NAME = "meta-catalog"
#: The export's columns no item carries to the catalog (Meta refuses an item for a field it does not know).
columns_not_sent = unmapped_columns
DEFAULT_URL = "https://graph.facebook.com"
#: The Graph API version the paths name (the newest the Marketing API reference showed in December 2026).
GRAPH_VERSION = "v27.0"
MAX_BATCH = 5000
#: Meta's limit on one items_batch call's body.
GRAPH_MAX_BYTES = 28 * 1024 * 1024
#: What the engine may pack in one call, counted with `operation_bytes`: 1 MiB under Meta's limit leaves room
#: for the envelope and the commas between 5,000 requests, whatever the engine's own way of counting.
LIMITS = Limits(max_batch=MAX_BATCH, max_batch_bytes=GRAPH_MAX_BYTES - 1024 * 1024)
#: Products per page of the list call (the Graph caps a page; 500 keeps an answer well under a few MB).
PAGE_SIZE = 500

#: Graph error codes of a rate limit (app, user, page, custom, ads, catalog batch): wait and send again.
_RATE_LIMIT_CODES = frozenset({4, 17, 32, 341, 613, 80004, 80014})
#: Graph error codes of credentials or permissions: no waiting will change them.
_AUTH_CODES = frozenset({10, 102, 104, 190, 200, 294})
_NOT_FOUND = re.compile(r"does not exist|not found|no such", re.IGNORECASE)
_DONE = frozenset({"finished", "canceled", "cancelled", "error"})


class BatchTooLarge(FireFeedError):
    """More operations or bytes than one items_batch call takes: the engine should send fewer at a time."""


def operation_bytes(op: Operation) -> int:
    """What one operation adds to an items_batch body, in bytes (what `limits.max_batch_bytes` counts)."""
    return len(_dumps(_request(op)))


def _request(op: Operation) -> dict[str, Any]:
    if op.op is Op.DELETE:
        return {"method": "DELETE", "data": {"id": op.key}}
    return {"method": "UPDATE", "data": to_meta(op.key, op.item or {})}


def _dumps(value: Any) -> bytes:
    # UTF-8, not \u escapes: a non-Latin title costs 2-3 bytes a character, not 6 (the 28 MB are bytes)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class MetaCatalogClient:
    """A ChannelClient for one Meta catalog; `client_for` builds it from an export's `sync:`."""

    name = NAME
    limits = LIMITS

    def __init__(
        self,
        *,
        catalog: str,
        token: str,
        base_url: str = DEFAULT_URL,
        settings: Settings | None = None,
        resolver: Resolver | None = None,
        timeout_s: float = 120.0,
        poll_first_s: float = 0.5,
        poll_max_s: float = 15.0,
        poll_timeout_s: float = 600.0,
    ) -> None:
        self._catalog = catalog
        self._token = token
        self._resolver = resolver
        self._base = f"{base_url.rstrip('/')}/{GRAPH_VERSION}/{catalog}"
        self._poll_first_s, self._poll_max_s, self._poll_timeout_s = poll_first_s, poll_max_s, poll_timeout_s
        # The real Graph needs no guard; any other base URL (a setting) is held to the fetcher's host rules.
        transport: httpx.BaseTransport
        if base_url.rstrip("/") == DEFAULT_URL or settings is None:
            transport = httpx.HTTPTransport(verify=tls_context())
        else:
            transport = GuardedTransport(source="sync", settings=settings)
        # 120 s: a 28 MB body on a slow uplink, and Meta takes its time to answer a large batch
        self._client = httpx.Client(
            transport=transport,
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=False,
            trust_env=False,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "FireFeed-Sync/1"},
        )

    # -- the ChannelClient protocol ----------------------------------------------------------------
    def send(self, ops: Sequence[Operation]) -> list[Outcome]:
        """One items_batch call for `ops`, polled until Meta has processed it; one outcome per operation.

        More operations or bytes than one call takes is the caller's mistake (BatchTooLarge), except one item
        too large on its own, which is that item's refusal. Should Meta still find a batch too large (its
        code 1, "reduce the amount of data"), the batch is sent again in two halves."""
        if not ops:
            return []
        if len(ops) > MAX_BATCH:
            raise BatchTooLarge(f"{len(ops)} operations in one Meta batch; it takes at most {MAX_BATCH}")
        requests = [_request(op) for op in ops]
        body = _dumps({"item_type": "PRODUCT_ITEM", "allow_upsert": True, "requests": requests})
        too_large = f"the item is too large for one Meta call ({len(body):,} bytes as JSON)"
        if len(body) > GRAPH_MAX_BYTES:
            if len(ops) == 1:
                return [Outcome(key=ops[0].key, ok=False, code="too_large", message=too_large)]
            raise BatchTooLarge(
                f"a Meta batch of {len(ops)} operations is {len(body):,} bytes; one call takes at most "
                f"{GRAPH_MAX_BYTES:,}"
            )
        try:
            answer = self._call("POST", "items_batch", content=body, headers={"Content-Type": "application/json"})
        except BatchTooLarge:  # Meta counts otherwise than we do: two halves, down to one item
            if len(ops) == 1:
                return [Outcome(key=ops[0].key, ok=False, code="too_large", message=too_large)]
            half = len(ops) // 2
            return self.send(ops[:half]) + self.send(ops[half:])
        refused = _validation_errors(answer)
        handles = [str(h) for h in answer.get("handles") or []]
        if not handles:  # Meta took nothing: what it did not name goes again
            return [
                _outcome(op, refused, default=_retry("not_ingested", "Meta ingested nothing of this batch"))
                for op in ops
            ]
        for handle in handles:
            refused.update(self._wait(handle, ops))
        outcomes = [_with_left_out(op, _outcome(op, refused)) for op in ops]
        log.info(
            "meta catalog %s: batch of %d operations (%d bytes) processed, %d refused",
            self._catalog,
            len(ops),
            len(body),
            sum(not o.ok for o in outcomes),
        )
        return outcomes

    def list_items(self) -> Iterator[RemoteItem]:
        """Every product of the catalog, page by page (the cursor, not the `next` URL: it may carry a token)."""
        fields = ",".join([*READ_FIELDS, "price", "sale_price", "currency", "errors", "review_status"])
        after = ""
        while True:
            params = {"fields": fields, "limit": str(PAGE_SIZE), **({"after": after} if after else {})}
            answer = self._call("GET", "products", params=params)
            for product in answer.get("data") or []:
                yield remote_item(product)
            paging = answer.get("paging") or {}
            after = str((paging.get("cursors") or {}).get("after") or "")
            if not paging.get("next") or not after:
                return

    def comparable(self, item: dict[str, Any]) -> dict[str, Any]:
        """An export item as `list_items` would give it back (for `sync repair`'s comparison)."""
        return comparable(item)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> MetaCatalogClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- polling -----------------------------------------------------------------------------------
    def _wait(self, handle: str, ops: Sequence[Operation]) -> dict[str, Outcome]:
        """Poll one handle until Meta has processed it; the refused operations by key.

        A busy answer to a poll is waited out within the same time bound: the batch is already taken, and
        giving up would make the engine send all of it again."""
        began, delay = time.monotonic(), self._poll_first_s
        while True:
            pause = delay
            try:
                answer = self._call(
                    "GET",
                    "check_batch_request_status",
                    params={"handle": handle, "load_ids_of_invalid_requests": "true"},
                )
            except ChannelBusy as busy:
                answer, pause = {}, max(delay, busy.retry_after or 0.0)
                if time.monotonic() - began + pause > self._poll_timeout_s:
                    raise
            found = (answer.get("data") or [{}])[0]
            status: dict[str, Any] = found if isinstance(found, dict) else {}
            state = str(status.get("status", "")).lower()
            if state in _DONE:
                return _batch_errors(status, state, ops)
            waited = time.monotonic() - began
            if waited + pause > self._poll_timeout_s:
                # Nothing is lost: the operations go back to pending and an UPDATE sent again is harmless.
                raise ChannelBusy(f"Meta was still processing batch {handle} after {waited:.0f} s", retry_after=60.0)
            time.sleep(pause)
            delay = min(delay * 2, self._poll_max_s)

    # -- one call ----------------------------------------------------------------------------------
    def _call(self, method: str, edge: str, **kwargs: Any) -> dict[str, Any]:
        url = f"{self._base}/{edge}"
        try:
            if self._resolver is not None:
                with self._resolver.hiding():
                    response = self._client.request(method, url, **kwargs)
            else:
                response = self._client.request(method, url, **kwargs)
        except httpx.TransportError as err:
            # from None: httpx's exception holds the request (headers included); its type and text suffice
            raise ChannelBusy(self._mask(f"Meta could not be reached ({type(err).__name__}: {err})")) from None
        except FireFeedError as err:  # the host rules refused the base URL: a setting to fix, not to wait out
            raise ChannelDown(self._mask(f"Meta base URL refused: {err}")) from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code == 200 and isinstance(answer, dict) and "error" not in answer:
            return answer
        raise self._graph_error(response, answer)

    def _graph_error(self, response: httpx.Response, answer: Any) -> Exception:
        found = answer.get("error") if isinstance(answer, dict) else None
        err: dict[str, Any] = found if isinstance(found, dict) else {}
        code = _int(err.get("code"))
        subcode = _int(err.get("error_subcode"))
        what = self._mask(str(err.get("message") or response.reason_phrase or "no message")[:500])
        said = f"Meta answered {response.status_code}" + (f" (code {code})" if code is not None else "") + f": {what}"
        if code == 1 and "reduce the amount of data" in what:
            return BatchTooLarge(said)
        if code in _RATE_LIMIT_CODES or response.status_code == 429:
            return ChannelBusy(said, retry_after=_regain_after(response), quota=True)
        if code in _AUTH_CODES or response.status_code in (401, 403):
            return ChannelDown(f"{said} (check the token in the catalog's sync secret and its permissions)")
        if code == 100 and subcode == 33:
            return ChannelDown(f"{said} (is catalog {self._catalog} right, and may the token's user manage it?)")
        if response.status_code >= 500 or code in (1, 2) or err.get("is_transient") is True:
            return ChannelBusy(said, retry_after=_regain_after(response))
        return ChannelDown(said)

    def _mask(self, text: str) -> str:
        text = self._resolver.mask(text) if self._resolver is not None else text  # -> ${secret:NAME}
        return text.replace(self._token, "[token]") if self._token else text


def client_for(
    sync: MetaCatalogSync,
    references: Resolver,
    settings: Settings,
    *,
    poll_first_s: float = 0.5,
    poll_max_s: float = 15.0,
    poll_timeout_s: float | None = None,
) -> MetaCatalogClient:
    """The client of an export's `sync: {to: meta-catalog, catalog, token}`; the token's secret is resolved
    here, in the worker, through the company's Resolver (which also hides it again in any message).

    A handle is polled after `poll_first_s`, then twice as long each time up to `poll_max_s`, for at most
    `poll_timeout_s` (default: the sync's own bound, at most 10 minutes)."""
    try:
        token = references.expand(sync.token, source="sync", where="sync.token")
    except FireFeedError as err:  # no such secret, or the key can't open it: the sync can't start
        raise ChannelDown(getattr(err, "reason", None) or err.message) from None
    return MetaCatalogClient(
        catalog=sync.catalog,
        token=token,
        base_url=settings.meta_graph_url or DEFAULT_URL,
        settings=settings,
        resolver=references,
        poll_first_s=poll_first_s,
        poll_max_s=poll_max_s,
        # a batch Meta has not processed within the sync's own bound is left for the next attempt
        poll_timeout_s=poll_timeout_s if poll_timeout_s is not None else min(600.0, settings.sync_max_s),
    )


# -- reading answers --------------------------------------------------------------------------------
def _retry(code: str, message: str) -> Outcome:
    return Outcome(key="", ok=False, code=code, message=message, retry=True)


def _outcome(op: Operation, refused: dict[str, Outcome], default: Outcome | None = None) -> Outcome:
    found = refused.get(op.key)
    if found is not None:
        if op.op is Op.DELETE and not found.retry and _NOT_FOUND.search(found.message):
            return Outcome(key=op.key, ok=True)  # deleting what the catalog does not hold: done
        return Outcome(key=op.key, ok=False, code=found.code, message=found.message, retry=found.retry)
    if default is not None:
        return Outcome(key=op.key, ok=default.ok, code=default.code, message=default.message, retry=default.retry)
    return Outcome(key=op.key, ok=True)


def _with_left_out(op: Operation, outcome: Outcome) -> Outcome:
    """An insert Meta took, with the optional fields it was sent without (unreadable, sent as "")."""
    if not outcome.ok or op.op is not Op.INSERT:
        return outcome
    left_out = to_meta_checked(op.key, op.item or {})[1]
    return replace(outcome, left_out=tuple(left_out)) if left_out else outcome


def _validation_errors(answer: dict[str, Any]) -> dict[str, Outcome]:
    """The items the items_batch answer itself refused (`validation_status`), by retailer id."""
    refused: dict[str, Outcome] = {}
    for status in answer.get("validation_status") or []:
        errors = [e for e in status.get("errors") or [] if isinstance(e, dict)]
        if errors:
            key = str(status.get("retailer_id", ""))
            message = "; ".join(str(e.get("message", "")) for e in errors)
            refused[key] = Outcome(key=key, ok=False, code="invalid_item", message=message[:1000])
    return refused


def _batch_errors(status: dict[str, Any], state: str, ops: Sequence[Operation]) -> dict[str, Outcome]:
    """The refused operations of a processed batch, by retailer id.

    `errors` is a sample; `ids_of_invalid_requests` (asked for) names every refused item. When neither
    accounts for `errors_total_count`, or the batch ended in `error`/`canceled`, the items nobody named are
    sent again rather than taken as done: a silent partial failure is what merchants complain about most.
    """
    refused: dict[str, Outcome] = {}
    messages: dict[str, list[str]] = {}
    for err in status.get("errors") or []:
        if not isinstance(err, dict):
            continue
        key = str(err.get("id") or "")
        line = _int(err.get("line"))
        if not key and line is not None and 1 <= line <= len(ops):
            key = ops[line - 1].key
        messages.setdefault(key, []).append(str(err.get("message") or "refused"))
    for key, said in messages.items():
        refused[key] = Outcome(key=key, ok=False, code="invalid_item", message="; ".join(said)[:1000])
    invalid = status.get("ids_of_invalid_requests")
    for key in invalid or []:
        refused.setdefault(str(key), Outcome(key=str(key), ok=False, code="invalid_item", message="refused by Meta"))
    total = _int(status.get("errors_total_count")) or 0
    unaccounted = invalid is None and total > sum(len(m) for m in messages.values())
    if state != "finished" or unaccounted:
        why = f"batch {state}" if state != "finished" else f"{total} errors, not all named"
        for op in ops:
            refused.setdefault(op.key, _retry("unconfirmed", f"Meta did not confirm this item ({why})"))
    return refused


def _regain_after(response: httpx.Response) -> float | None:
    """Seconds until the quota is back: `Retry-After`, or the Business Use Case header's minutes."""
    after = response.headers.get("Retry-After")
    if after and after.strip().isdigit():
        return float(after)
    usage = response.headers.get("X-Business-Use-Case-Usage")
    if not usage:
        return None
    try:
        minutes = [
            float(u.get("estimated_time_to_regain_access") or 0)
            for uses in json.loads(usage).values()
            for u in uses
            if isinstance(u, dict)
        ]
    except (ValueError, AttributeError, TypeError):
        return None
    return max(minutes) * 60 if minutes and max(minutes) > 0 else None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
