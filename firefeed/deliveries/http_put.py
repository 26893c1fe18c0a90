"""An https:// delivery target: the published file streamed in one PUT (SPEC 10 C7).

The request goes through the fetcher's guarded client (firefeed/pipeline/_netguard.py): the host
is judged by the host rules before any connection, no redirect is followed, no proxy or ~/.netrc
is read. Headers are the spec's, references expanded and checked again after expansion.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from firefeed.config import Settings
from firefeed.errors import FetchError, InvalidSourceRequestError
from firefeed.pipeline._netguard import check_url_host, guarded_client
from firefeed.pipeline._retries import Retryable
from firefeed.pipeline.fetch import expand_headers

if TYPE_CHECKING:
    from firefeed.secrets.references import Resolver

# Answers worth another try: the server was busy or briefly away.
_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def put_https(
    *,
    label: str,
    url: str,
    headers: Mapping[str, str],
    local: Path,
    references: Resolver,
    shown: str,
    settings: Settings,
) -> None:
    """PUT `local` to `url` (references not expanded yet); FetchError for a refusal, Retryable for a server
    that may answer better later or a connection that failed."""
    expanded_url = references.expand(url.strip(), source=label, where="the URL", in_url=True)
    if not httpx.URL(expanded_url).host:
        raise InvalidSourceRequestError(label, "the URL has no host")
    check_url_host(label, expanded_url)
    sent_headers = expand_headers(label, headers, references)
    with references.hiding(), guarded_client(source=label, settings=settings) as client, local.open("rb") as body:
        try:
            # A file object: httpx streams it in chunks and sends its Content-Length (many object stores
            # refuse a chunked PUT).
            answer = client.put(expanded_url, content=body, headers=sent_headers)
        except httpx.TransportError as exc:
            raise Retryable(f"could not send to {shown}: {type(exc).__name__}") from exc
    if answer.is_success:
        return
    reason = f"{shown}: the server answered {answer.status_code} {answer.reason_phrase}".rstrip()
    if answer.status_code in _RETRY_STATUS:
        raise Retryable(reason)
    if answer.is_redirect:
        reason += " (a delivery follows no redirect: put the final URL in the spec)"
    raise FetchError(label, reason)
