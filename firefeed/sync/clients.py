"""The channel client of an export's `sync` (Google: google_merchant.py, Meta: meta_catalog.py), with its base
URL held to the fetcher's host rules.

The default base URLs (Google's and Meta's own API hosts) are trusted as they are; any other
(FIREFEED_GOOGLE_MERCHANT_URL, FIREFEED_META_GRAPH_URL: a proxy, a test stand-in) must pass the rules a
source URL passes: a loopback or private address only when the operator allowed it
(FIREFEED_FETCH_ALLOWED_HOSTS, FIREFEED_FETCH_ALLOW_PRIVATE). A refusal is `ChannelDown`: the sync
stops with the reason, the run does not fail.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from firefeed.config import Settings
from firefeed.sync.channel import ChannelClient, ChannelDown

if TYPE_CHECKING:
    from firefeed.secrets.references import Resolver
    from firefeed.spec.sync import GoogleMerchantSync, MetaCatalogSync

_DEFAULTS = {
    "google-merchant": ("google_merchant_url", "https://merchantapi.googleapis.com"),
    "meta-catalog": ("meta_graph_url", "https://graph.facebook.com"),
}
_MODULES = {"google-merchant": "firefeed.sync.google_merchant", "meta-catalog": "firefeed.sync.meta_catalog"}


def check_base_url(to: str, settings: Settings) -> None:
    """ChannelDown when the channel's base URL setting points somewhere the fetcher's host rules refuse."""
    from firefeed.errors import FetchError
    from firefeed.pipeline._netguard import check_url_host, host_is_exempt, resolve_public

    setting, default = _DEFAULTS[to]
    url = str(getattr(settings, setting)).rstrip("/")
    if url == default:
        return
    name = f"FIREFEED_{setting.upper()}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ChannelDown(f"{name} must be an http(s) URL with a host")
    if host_is_exempt(parts.hostname, settings):
        return
    try:
        check_url_host(name, url)
        resolve_public(
            name, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80),
            allow_private=settings.fetch_allow_private,
        )  # fmt: skip
    except FetchError as err:
        raise ChannelDown(f"{name}: {err.reason}") from None
    except Exception as err:  # an unresolvable host: the same as a refused one, said plainly
        raise ChannelDown(f"{name}: {err}") from None


def client_for(sync: GoogleMerchantSync | MetaCatalogSync, references: Resolver, settings: Settings) -> ChannelClient:
    """The client of the export's channel; its credentials are expanded from the company's secrets by the
    client itself (through `references`), so their value never passes through the engine."""
    check_base_url(sync.to, settings)
    module = importlib.import_module(_MODULES[sync.to])
    client: ChannelClient = module.client_for(sync, references, settings)
    return client


def columns_not_sent(to: str, columns: Sequence[str]) -> list[str]:
    """The export's columns no item carries to the channel `to` (Meta's catalog takes only the fields it
    knows; Google gets any other column as a custom attribute), for the report to say so."""
    found: list[str] = importlib.import_module(_MODULES[to]).columns_not_sent(columns)
    return found
