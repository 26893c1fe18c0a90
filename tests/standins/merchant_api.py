"""A stand-in for Google's Merchant API (products v1) and its OAuth2 token endpoint, on 127.0.0.1.

Written from Google's published REST reference for the calls FireFeed's sync makes (SPEC 10 C9-C10):

- ``POST {token_uri}``: the JWT-bearer grant a service account uses
  (``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<RS256 JWT>``); the JWT's
  signature is checked with the public key of the service account the stand-in made
  (`service_account_info`), as are its ``aud`` (the token URI, or Google's own token endpoint, which
  google-auth always names), ``exp`` and ``scope``; the answer is
  ``{access_token, expires_in, token_type}``.
- ``POST /products/v1/accounts/{account}/productInputs:insert?dataSource=accounts/{a}/dataSources/{d}``
  with a ProductInput (``offerId``, ``contentLanguage``, ``feedLabel``, ``productAttributes``,
  ``customAttributes``); answers the ProductInput with its ``name``. An insert with the same
  language, feed label and offer id replaces the product.
- ``DELETE /products/v1/accounts/{account}/productInputs/{productInput}?dataSource=...``, the
  ``{productInput}`` segment either plain ``{contentLanguage}~{feedLabel}~{offerId}`` or its unpadded
  base64url encoding (the server tells them apart by the ``~``, as Google's does); ``{}``, or 404
  NOT_FOUND for a product it does not hold.
- ``GET /products/v1/accounts/{account}/products?pageSize=&pageToken=``: the processed products, each
  with ``productStatus.itemLevelIssues``; at most 1,000 a page (25 when ``pageSize`` is not given).

Every products call needs ``Authorization: Bearer <a token it issued>`` (else 401 UNAUTHENTICATED),
and counts against a per-minute quota over a sliding 60 s window (over it: 429 RESOURCE_EXHAUSTED with
the ``quota/request_rate_too_high`` reason the Merchant API documents). Errors use Google's JSON error
shape (AIP-193): ``{"error": {"code", "message", "status", "details": [ErrorInfo]}}``. An insert whose
ProductInput Google would refuse for its form (an unknown field, an enum's feed spelling, an int64 that is
not a string of digits: tests/standins/merchant_schema.py) answers 400 INVALID_ARGUMENT in Google's words.

So that "google says" has something to say, the stand-in derives a few item-level issues itself: a
missing ``imageLink``, ``price`` or ``title`` (``item_missing_required_attribute``, DISAPPROVED) and a
GTIN with a wrong check digit (``invalid_upc``, DISAPPROVED); a test may set an offer's issues
(`set_issues`). Other test hooks: `fail_next` (the next N products calls answer 503 UNAVAILABLE),
`refuse_offer` (inserts of that offer answer 400 INVALID_ARGUMENT with a message), `revoke_tokens`,
`refuse_credentials`, `edit_product`/`drop_product` (a change made behind FireFeed's back), and
`requests`, a record of every call (method, path, offer id, time, status).

Run alone for the bench (`make bench-sync`)::

    python -m tests.standins.merchant_api --port 8600 --latency-ms 50 --per-minute 3000 \
        --service-account-out /tmp/sa.json

It prints ``ready http://127.0.0.1:8600`` once listening, and ``GET /_standin/stats`` answers its
counters as JSON (requests by status, products held, the most requests seen in any 60 s window).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import collections
import functools
import json
import secrets
import signal
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.standins.merchant_schema import Invalid, check_product_input

SCOPE = "https://www.googleapis.com/auth/content"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_PATH = "/token"
#: the audience google-auth puts in a service account's JWT whatever its token_uri (Google accepts it)
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
MAX_PAGE = 1000
DEFAULT_PAGE = 25
_PREFIX = "/products/v1/accounts/"


@dataclass(frozen=True)
class Request:
    """One call the stand-in answered."""

    method: str
    path: str  # without the query
    offer_id: str | None
    at: float  # time.monotonic()
    status: int


class ApiError(Exception):
    """An answer in Google's error shape."""

    def __init__(self, code: int, status: str, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.code, self.status, self.message, self.reason = code, status, message, reason

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "status": self.status}
        if self.reason:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.reason,
                    "domain": "merchantapi.googleapis.com",
                    "metadata": {"REASON": self.reason},
                }
            ]
        return {"error": error}


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode_product_id(content_language: str, feed_label: str, offer_id: str) -> str:
    """The unpadded base64url form of ``{contentLanguage}~{feedLabel}~{offerId}``."""
    raw = f"{content_language}~{feed_label}~{offer_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_product_id(segment: str) -> tuple[str, str, str]:
    """(contentLanguage, feedLabel, offerId) from a name's last segment, plain or base64url."""
    segment = urllib.parse.unquote(segment)
    if "~" not in segment:
        try:
            segment = _b64url_decode(segment).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise ApiError(400, "INVALID_ARGUMENT", f"Invalid product name segment {segment!r}.") from exc
    parts = segment.split("~", 2)
    if len(parts) != 3 or not all(parts):
        raise ApiError(400, "INVALID_ARGUMENT", f"Invalid product name {segment!r}.")
    return parts[0], parts[1], parts[2]


def _gtin_ok(gtin: str) -> bool:
    if not gtin.isdigit() or len(gtin) not in (8, 12, 13, 14):
        return False
    digits = [int(c) for c in gtin]
    total = sum(d * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(digits[:-1])))
    return (10 - total % 10) % 10 == digits[-1]


def derived_issues(product_input: dict[str, Any]) -> list[dict[str, Any]]:
    """The item-level issues the stand-in finds itself, in Merchant API's ItemLevelIssue shape."""
    attrs = product_input.get("productAttributes") or {}
    country = [product_input.get("feedLabel", "")]
    issues = []
    for field, name in (("title", "title"), ("price", "price"), ("imageLink", "image link")):
        if not attrs.get(field):
            issues.append(
                {
                    "code": "item_missing_required_attribute",
                    "severity": "DISAPPROVED",
                    "resolution": "merchant_action",
                    "attribute": name,
                    "reportingContext": "SHOPPING_ADS",
                    "description": f"Missing value [{name}]",
                    "detail": f"Add the required attribute [{name}]",
                    "applicableCountries": country,
                }
            )
    for gtin in attrs.get("gtins") or []:
        if not _gtin_ok(str(gtin)):
            issues.append(
                {
                    "code": "invalid_upc",
                    "severity": "DISAPPROVED",
                    "resolution": "merchant_action",
                    "attribute": "gtin",
                    "reportingContext": "SHOPPING_ADS",
                    "description": "Invalid value [gtin]",
                    "detail": "Use a valid GTIN",
                    "applicableCountries": country,
                }
            )
    return issues


@functools.cache
def _test_key() -> rsa.RSAPrivateKey:
    """One RSA key for every service account the stand-ins make in a process (each has its own email, which
    is what a token endpoint knows a key by): a 2048-bit key takes 0.1-0.5 s to make."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@dataclass
class _Held:
    account: str
    data_source: str
    product_input: dict[str, Any]
    created: float
    updated: float


class MerchantStandIn:
    """The server and its state; `start` it (or use it as a context manager) and point a client at `url`."""

    def __init__(
        self,
        *,
        latency_ms: float = 0,
        per_minute: int | None = None,
        accounts: set[str] | None = None,
        token_lifetime: int = 3600,
        port: int = 0,
        retry_after: float | None = None,
    ) -> None:
        self.latency = latency_ms / 1000
        self.per_minute = per_minute
        self.accounts = accounts  # None: any account is the caller's
        self.token_lifetime = token_lifetime
        self.retry_after = retry_after  # a Retry-After header on 429s (Google sends none by default)
        self._port = port
        self._lock = threading.Lock()
        self._window: collections.deque[float] = collections.deque()
        self.max_in_window = 0
        self.requests: list[Request] = []
        self.by_status: collections.Counter[int] = collections.Counter()
        self._products: dict[tuple[str, str, str, str], _Held] = {}  # (account, lang, label, offer)
        self._issues: dict[str, list[dict[str, Any]]] = {}
        self._tokens: dict[str, float] = {}
        self._keys: dict[str, rsa.RSAPublicKey] = {}
        self._fail_next: list[tuple[int, str]] = []
        self._refused: dict[str, str] = {}
        self._refuse_credentials = False
        self.tokens_issued = 0
        self.issued: list[str] = []  # every access token handed out (a test looks for them in logs)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> MerchantStandIn:
        server = ThreadingHTTPServer(("127.0.0.1", self._port), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        # a 50 ms poll: `stop` waits for the loop's next look, 0.5 s by default, in every test that stops one
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="merchant-standin", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> MerchantStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "start the stand-in first"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL, in place of https://merchantapi.googleapis.com."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_uri(self) -> str:
        return self.url + TOKEN_PATH

    # ------------------------------------------------------------------ credentials

    def service_account_info(self, email: str = "firefeed@standin.iam.gserviceaccount.com") -> dict[str, Any]:
        """A new service account whose key this stand-in trusts, as the JSON Google hands out."""
        key = _test_key()
        with self._lock:
            self._keys[email] = key.public_key()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        return {
            "type": "service_account",
            "project_id": "standin",
            "private_key_id": secrets.token_hex(20),
            "private_key": pem,
            "client_email": email,
            "client_id": str(secrets.randbelow(10**20)),
            "auth_uri": self.url + "/auth",
            "token_uri": self.token_uri,
        }

    def service_account_json(self, email: str = "firefeed@standin.iam.gserviceaccount.com") -> str:
        return json.dumps(self.service_account_info(email))

    # ------------------------------------------------------------------ test hooks

    def fail_next(self, n: int, code: int = 503, status: str = "UNAVAILABLE") -> None:
        """The next `n` products calls answer `code` (503 UNAVAILABLE by default)."""
        with self._lock:
            self._fail_next.extend([(code, status)] * n)

    def refuse_offer(self, offer_id: str, message: str) -> None:
        """Inserts of `offer_id` answer 400 INVALID_ARGUMENT with `message`."""
        with self._lock:
            self._refused[offer_id] = message

    def revoke_tokens(self) -> None:
        """Every token issued so far answers 401 from now on (a new one can be had)."""
        with self._lock:
            self._tokens.clear()

    def refuse_credentials(self, refuse: bool = True) -> None:
        """The token endpoint answers invalid_grant (a deleted or disabled service account key)."""
        with self._lock:
            self._refuse_credentials = refuse
            if refuse:
                self._tokens.clear()

    def set_issues(self, offer_id: str, issues: list[dict[str, Any]]) -> None:
        """The item-level issues products.list reports for `offer_id` (instead of the derived ones)."""
        with self._lock:
            self._issues[offer_id] = issues

    def products(self, account: str | None = None) -> dict[str, dict[str, Any]]:
        """The product inputs held (of one account, or all), by offer id (copies)."""
        with self._lock:
            return {
                k[3]: json.loads(json.dumps(h.product_input))
                for k, h in self._products.items()
                if account is None or k[0] == account
            }

    def edit_product(self, offer_id: str, **attributes: Any) -> None:
        """Change a held product's attributes behind FireFeed's back (None removes one)."""
        with self._lock:
            held = next(h for k, h in self._products.items() if k[3] == offer_id)
            attrs = held.product_input.setdefault("productAttributes", {})
            for name, value in attributes.items():
                if value is None:
                    attrs.pop(name, None)
                else:
                    attrs[name] = value
            held.updated = time.time()

    def add_product(self, account: str, data_source: str, product_input: dict[str, Any]) -> None:
        """Hold a product FireFeed never sent (an orphan someone else made)."""
        key = (account, product_input["contentLanguage"], product_input["feedLabel"], product_input["offerId"])
        now = time.time()
        with self._lock:
            self._products[key] = _Held(account, data_source, dict(product_input), now, now)

    def drop_product(self, offer_id: str) -> None:
        """Remove a product behind FireFeed's back."""
        with self._lock:
            for key in [k for k in self._products if k[3] == offer_id]:
                del self._products[key]

    def calls(self, method: str | None = None, offer_id: str | None = None) -> list[Request]:
        """The products calls recorded (not token calls), optionally one method's or one offer's."""
        with self._lock:
            found = list(self.requests)
        return [
            r
            for r in found
            if r.path != TOKEN_PATH
            and (method is None or r.method == method)
            and (offer_id is None or r.offer_id == offer_id)
        ]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": len(self.requests),
                "by_status": {str(k): v for k, v in sorted(self.by_status.items())},
                "products": len(self._products),
                "tokens_issued": self.tokens_issued,
                "max_in_window": self.max_in_window,
                "per_minute": self.per_minute,
            }

    # ------------------------------------------------------------------ serving

    def _record(self, method: str, path: str, offer_id: str | None, status: int) -> None:
        with self._lock:
            self.requests.append(Request(method, path, offer_id, time.monotonic(), status))
            self.by_status[status] += 1

    def issue_token(self, form: dict[str, str]) -> dict[str, Any]:
        if form.get("grant_type") != JWT_BEARER:
            raise _OAuthError("unsupported_grant_type", "Invalid grant_type.")
        assertion = form.get("assertion", "")
        try:
            head_b64, claims_b64, sig_b64 = assertion.split(".")
            header = json.loads(_b64url_decode(head_b64))
            claims = json.loads(_b64url_decode(claims_b64))
            signature = _b64url_decode(sig_b64)
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise _OAuthError("invalid_grant", "Invalid JWT.") from exc
        with self._lock:
            key = self._keys.get(str(claims.get("iss")))
            refuse = self._refuse_credentials
        if header.get("alg") != "RS256" or key is None or refuse:
            raise _OAuthError("invalid_grant", "Invalid JWT Signature.")
        try:
            key.verify(signature, f"{head_b64}.{claims_b64}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature as exc:
            raise _OAuthError("invalid_grant", "Invalid JWT Signature.") from exc
        now = time.time()
        if claims.get("aud") not in (self.token_uri, GOOGLE_TOKEN_AUDIENCE):
            raise _OAuthError("invalid_grant", "Invalid JWT: audience does not match the token URI.")
        if not (float(claims.get("iat", 0)) - 300 <= now < float(claims.get("exp", 0)) + 300):
            raise _OAuthError("invalid_grant", "Invalid JWT: Token must be a short-lived token.")
        if SCOPE not in str(claims.get("scope", "")).split():
            raise _OAuthError("invalid_scope", "Invalid OAuth scope or ID token audience provided.")
        token = "ya29.standin-" + secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[token] = now + self.token_lifetime
            self.tokens_issued += 1
            self.issued.append(token)
        return {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"}

    def check_call(self, authorization: str | None) -> None:
        """Auth, then quota, then injected faults: what every products call goes through first."""
        now = time.time()
        token = (authorization or "").removeprefix("Bearer ").strip()
        with self._lock:
            expiry = self._tokens.get(token)
            if expiry is None or expiry < now:
                raise ApiError(
                    401,
                    "UNAUTHENTICATED",
                    "Request had invalid authentication credentials. Expected OAuth 2 access token, "
                    "login cookie or other valid authentication credential.",
                )
            if self.per_minute is not None:
                tick = time.monotonic()
                while self._window and self._window[0] <= tick - 60:
                    self._window.popleft()
                if len(self._window) >= self.per_minute:
                    raise ApiError(
                        429,
                        "RESOURCE_EXHAUSTED",
                        "[quota/request_rate_too_high] Quota exceeded: too many requests per minute.",
                        reason="quota/request_rate_too_high",
                    )
                self._window.append(tick)
                self.max_in_window = max(self.max_in_window, len(self._window))
            if self._fail_next:
                code, status = self._fail_next.pop(0)
                raise ApiError(code, status, "The service is currently unavailable.")

    def _account(self, account: str) -> None:
        if self.accounts is not None and account not in self.accounts:
            raise ApiError(403, "PERMISSION_DENIED", f"The caller does not have access to the accounts: [{account}]")

    def _data_source(self, account: str, query: dict[str, list[str]]) -> str:
        data_source = (query.get("dataSource") or [""])[0]
        parts = data_source.split("/")
        if len(parts) != 4 or parts[0] != "accounts" or parts[2] != "dataSources" or not parts[3]:
            raise ApiError(400, "INVALID_ARGUMENT", f"Invalid data source name {data_source!r}.")
        if parts[1] != account:
            raise ApiError(400, "INVALID_ARGUMENT", "The data source does not belong to the account.")
        return data_source

    def insert(self, account: str, query: dict[str, list[str]], body: dict[str, Any]) -> dict[str, Any]:
        self._account(account)
        data_source = self._data_source(account, query)
        for required in ("offerId", "contentLanguage", "feedLabel"):
            if not isinstance(body.get(required), str) or not body[required]:
                raise ApiError(400, "INVALID_ARGUMENT", f"[{required}] Required parameter: {required}")
        try:
            check_product_input(body)
        except Invalid as exc:
            raise ApiError(400, "INVALID_ARGUMENT", str(exc)) from None
        offer = " ".join(body["offerId"].split())
        lang, label = body["contentLanguage"], body["feedLabel"]
        with self._lock:
            refused = self._refused.get(offer)
        if refused is not None:
            raise ApiError(400, "INVALID_ARGUMENT", refused)
        stored = {
            "offerId": offer,
            "contentLanguage": lang,
            "feedLabel": label,
            "productAttributes": body.get("productAttributes") or {},
        }
        if body.get("customAttributes"):
            stored["customAttributes"] = body["customAttributes"]
        now = time.time()
        key = (account, lang, label, offer)
        with self._lock:
            held = self._products.get(key)
            created = held.created if held else now
            self._products[key] = _Held(account, data_source, stored, created, now)
        plain = f"{lang}~{label}~{offer}"
        encoded = encode_product_id(lang, label, offer)
        return {
            "name": f"accounts/{account}/productInputs/{plain}",
            "base64EncodedName": f"accounts/{account}/productInputs/{encoded}",
            "product": f"accounts/{account}/products/{plain}",
            "base64EncodedProduct": f"accounts/{account}/products/{encoded}",
            **stored,
        }

    def delete(self, account: str, segment: str, query: dict[str, list[str]]) -> dict[str, Any]:
        self._account(account)
        data_source = self._data_source(account, query)
        lang, label, offer = decode_product_id(segment)
        with self._lock:
            held = self._products.get((account, lang, label, offer))
            if held is None or held.data_source != data_source:
                raise ApiError(404, "NOT_FOUND", f"Requested entity was not found: {lang}~{label}~{offer}")
            del self._products[(account, lang, label, offer)]
        return {}

    def list(self, account: str, query: dict[str, list[str]]) -> dict[str, Any]:
        self._account(account)
        try:
            size = int((query.get("pageSize") or [str(DEFAULT_PAGE)])[0] or DEFAULT_PAGE)
            token = (query.get("pageToken") or [""])[0]
            start = int(_b64url_decode(token).decode()) if token else 0
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise ApiError(400, "INVALID_ARGUMENT", "Invalid page token or size.") from exc
        size = min(max(size, 1), MAX_PAGE)
        with self._lock:
            keys = sorted(k for k in self._products if k[0] == account)
            page = [(k, self._products[k]) for k in keys[start : start + size]]
            more = start + size < len(keys)
            overrides = {k[3]: self._issues.get(k[3]) for k, _ in page}
        out = []
        for (acc, lang, label, offer), held in page:
            plain = f"{lang}~{label}~{offer}"
            issues = overrides[offer]
            product = {
                "name": f"accounts/{acc}/products/{plain}",
                "base64EncodedName": f"accounts/{acc}/products/{encode_product_id(lang, label, offer)}",
                "offerId": offer,
                "contentLanguage": lang,
                "feedLabel": label,
                "dataSource": held.data_source,
                "productAttributes": held.product_input.get("productAttributes", {}),
                "productStatus": {
                    "itemLevelIssues": issues if issues is not None else derived_issues(held.product_input),
                    "creationDate": _rfc3339(held.created),
                    "lastUpdateDate": _rfc3339(held.updated),
                    "googleExpirationDate": _rfc3339(held.updated + 30 * 86400),
                },
            }
            if held.product_input.get("customAttributes"):
                product["customAttributes"] = held.product_input["customAttributes"]
            out.append(product)
        answer: dict[str, Any] = {"products": out}
        if more:
            answer["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode().rstrip("=")
        return answer


class _OAuthError(Exception):
    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error, self.description = error, description


def _handler_for(standin: MerchantStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Google's front end
        #: headers and body go out as two writes; with Nagle on, the second waits for the client's
        #: delayed ACK (40 ms a request)
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _serve(self, method: str) -> None:
            url = urllib.parse.urlsplit(self.path)
            path, query = url.path, urllib.parse.parse_qs(url.query)
            raw = self._body()
            if method == "POST" and path == TOKEN_PATH:
                form = {k: v[0] for k, v in urllib.parse.parse_qs(raw.decode("utf-8", "replace")).items()}
                try:
                    answer, code = standin.issue_token(form), 200
                except _OAuthError as exc:
                    answer, code = {"error": exc.error, "error_description": exc.description}, 400
                standin._record(method, path, None, code)
                self._answer(code, answer)
                return
            if method == "GET" and path == "/_standin/stats":
                self._answer(200, standin.stats())
                return
            if standin.latency:
                time.sleep(standin.latency)
            headers: dict[str, str] = {}
            rest = path[len(_PREFIX) :].split("/") if path.startswith(_PREFIX) else []
            account = rest[0] if rest else ""
            body: Any = None
            offer: str | None = None  # read before the checks, so a refused call is recorded with its offer
            if method == "POST" and rest[1:] == ["productInputs:insert"]:
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = None
                if isinstance(body, dict) and isinstance(body.get("offerId"), str):
                    offer = body["offerId"]
            elif method == "DELETE" and len(rest) == 3 and rest[1] == "productInputs":
                try:
                    offer = decode_product_id(rest[2])[2]
                except ApiError:
                    offer = None
            try:
                standin.check_call(self.headers.get("Authorization"))
                if method == "POST" and rest[1:] == ["productInputs:insert"]:
                    if not isinstance(body, dict):
                        raise ApiError(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
                    answer, code = standin.insert(account, query, body), 200
                elif method == "DELETE" and len(rest) == 3 and rest[1] == "productInputs":
                    answer, code = standin.delete(account, rest[2], query), 200
                elif method == "GET" and rest[1:] == ["products"]:
                    answer, code = standin.list(account, query), 200
                else:
                    raise ApiError(404, "NOT_FOUND", "Method not found.")
            except ApiError as exc:
                answer, code = exc.body(), exc.code
                if code == 429 and standin.retry_after is not None:
                    headers["Retry-After"] = f"{standin.retry_after:g}"
            standin._record(method, path, offer, code)
            self._answer(code, answer, headers)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler


@contextmanager
def running(**kwargs: Any) -> Iterator[MerchantStandIn]:
    """A started stand-in for the length of the block."""
    standin = MerchantStandIn(**kwargs).start()
    try:
        yield standin
    finally:
        standin.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0)
    parser.add_argument("--per-minute", type=int, default=None)
    parser.add_argument(
        "--service-account-out", type=Path, default=None, help="write a service account JSON this stand-in trusts here"
    )
    args = parser.parse_args(argv)
    standin = MerchantStandIn(latency_ms=args.latency_ms, per_minute=args.per_minute, port=args.port).start()
    if args.service_account_out is not None:
        args.service_account_out.write_text(standin.service_account_json())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"ready {standin.url}", flush=True)
    stop.wait()
    standin.stop()


if __name__ == "__main__":
    main()
