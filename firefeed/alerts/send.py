"""One signed POST of an alert, through the fetcher's host rules (firefeed/pipeline/_netguard.py).

The body is sent exactly as stored, and the signature is over those bytes:
`X-FireFeed-Signature: sha256=<hex HMAC-SHA256 of the body, keyed with the company secret's value>`.
No redirect is followed (a 3xx is a failed attempt that names its status), the answer's body is not
read beyond a few hundred bytes, and every phase of the request is bounded by FIREFEED_ALERT_TIMEOUT_S.
The secret's value is only ever the HMAC's key: no message here can quote it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from firefeed.alerts.outbox import Outcome
from firefeed.alerts.shown import target_host
from firefeed.config import Settings
from firefeed.errors import FetchError
from firefeed.pipeline._netguard import GuardedTransport
from firefeed.secrets.references import hiding_in_library_logs

SIGNATURE_HEADER = "X-FireFeed-Signature"
#: What a receiver reads of an answer that is not 2xx, for the attempt's error (a sink's page can be large)
_ANSWER_BYTES = 256
#: Answers worth another attempt; any other 4xx (and a 3xx) will not change by waiting
_RETRYABLE_4XX = frozenset({408, 425, 429})


def signature(body: bytes, key: str) -> str:
    """The X-FireFeed-Signature value of `body` under the secret's value `key`."""
    return "sha256=" + hmac.new(key.encode("utf-8"), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    delivered: bool
    retry: bool  # False with delivered False: refused for good


def post(
    url: str,
    body: bytes,
    *,
    key: str,
    headers: dict[str, str],
    settings: Settings,
) -> Result:
    """POST `body` to `url` signed with `key`; what came of it. Never raises for the receiver's faults."""
    began = time.monotonic()

    def outcome(code: int | None, error: str | None) -> Outcome:
        return Outcome(status_code=code, error=error, ms=int((time.monotonic() - began) * 1000))

    sent = {**headers, "Content-Type": "application/json", SIGNATURE_HEADER: signature(body, key)}
    guarded = GuardedTransport(source="alert", settings=settings)
    host = target_host(url)
    try:
        with (
            hiding_in_library_logs(_hidden_in_logs(url, host)),
            httpx.Client(
                transport=guarded,
                timeout=httpx.Timeout(settings.alert_timeout_s),
                follow_redirects=False,
                trust_env=False,
                headers={"User-Agent": "FireFeed-Alerts/1"},
            ) as client,
            client.stream("POST", url, content=body, headers=sent) as response,
        ):
            code = response.status_code
            if 200 <= code < 300:
                return Result(outcome(code, None), delivered=True, retry=False)
            answer = _start_of(response)
    except FetchError as err:  # the host rules refused the address: the same at every attempt
        return Result(outcome(None, err.reason), delivered=False, retry=False)
    except httpx.TimeoutException:
        return Result(outcome(None, f"no answer within {settings.alert_timeout_s:g} s"), delivered=False, retry=True)
    except httpx.HTTPError as err:
        return Result(outcome(None, f"{type(err).__name__}: {err}"[:300]), delivered=False, retry=True)
    if 300 <= code < 400:
        where = _redirect_target(response.headers.get("location", ""))
        error = f"answered {code} (to {where}); redirects are not followed: give the final URL"
        return Result(outcome(code, error), delivered=False, retry=False)
    error = f"answered {code}" + (f": {answer}" if answer else "")
    return Result(outcome(code, error), delivered=False, retry=code >= 500 or code in _RETRYABLE_4XX)


def _hidden_in_logs(url: str, host: str) -> dict[str, str]:
    """What the HTTP library's log lines show of the URL: its host. Its path and query are hidden apart too:
    a redirect's Location header (logged with the answer's headers) names them under another scheme."""
    hidden = {url: host, str(httpx.URL(url)): host}
    split = urlsplit(url)
    for tail in (split.path + (f"?{split.query}" if split.query else ""), httpx.URL(url).raw_path.decode("ascii")):
        if len(tail) > 1:  # not "/" alone, which every line holds
            hidden[tail] = "/…"
    return hidden


def _redirect_target(location: str) -> str:
    """Where a redirect points, without its path or query: a hook moved to https names the same path, and
    with it the hook's token, which the listing and logs never show (alerts/shown.py)."""
    try:
        parts = urlsplit(location)
    except ValueError:
        return "an unreadable Location"
    host = target_host(location)
    return f"{parts.scheme}://{host}/…" if parts.scheme and host else "another path of the same host"


def _start_of(response: httpx.Response) -> str:
    """The first bytes of an answer, as one line of text."""
    read = b""
    for chunk in response.iter_bytes():
        read += chunk
        if len(read) >= _ANSWER_BYTES:
            break
    return " ".join(read[:_ANSWER_BYTES].decode("utf-8", "replace").split())
