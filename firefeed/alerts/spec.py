"""A project's `alerts:` entries: where to POST, on which events, signed with which company secret.

`secret` is required: the signature is what lets a receiver tell FireFeed's alert from anyone's POST
to a URL that is easy to learn (it sits in every spec). The model checks the form; `check_alerts` (at
apply, like server_checks.py) what only the server knows: the company's secrets, and the host rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from firefeed.errors import SpecError, UnsafeURLError
from firefeed.secrets.references import SECRET_NAME

if TYPE_CHECKING:
    from firefeed.config import Settings


class AlertEvent(StrEnum):
    FAILED = "failed"  # a run ended FAILED (not cancelled, not blocked)
    BLOCKED = "blocked"  # a run stopped by the drop guard or max_invalid (PublishBlockedError)
    DELIVERY_FAILED = "delivery_failed"  # a published file did not reach a delivery target (C7)
    RECOVERED = "recovered"  # the first SUCCEEDED run after a failed or blocked one
    SYNC_FAILED = "sync_failed"  # a channel API refused an export's sync (C9-C10, firefeed/sync)


#: The run error types that make a FAILED run `blocked` (firefeed/errors.py: PublishBlockedError's subclasses)
BLOCKED_ERRORS = frozenset({"PublishBlockedError", "DropGuardError", "ChannelRejectError"})


class AlertSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1, max_length=2048)
    on: list[AlertEvent] = Field(default_factory=lambda: list(AlertEvent), min_length=1)
    secret: str

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        try:
            parts = urlsplit(v)
            _ = parts.port  # a port that is no number raises here
        except ValueError:
            raise ValueError(f"{v!r} is not a URL") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            # A password in the URL would be shown wherever the URL is (the alert list, logs): sign instead.
            raise ValueError("must not hold a user or password; the signature (secret:) authenticates the alert")
        if "${" in v:
            raise ValueError("takes no ${...} reference; the signature (secret:) authenticates the alert")
        return v

    @field_validator("on")
    @classmethod
    def _on(cls, v: list[AlertEvent]) -> list[AlertEvent]:
        return list(dict.fromkeys(v))

    @field_validator("secret")
    @classmethod
    def _secret(cls, v: str) -> str:
        name = v[len("${secret:") : -1] if v.startswith("${secret:") and v.endswith("}") else v
        if not SECRET_NAME.fullmatch(name):
            raise ValueError("must name a company secret (1-64 letters, digits or _): `secret: ALERTS_KEY`")
        return name


def check_alerts(alerts: Iterable[AlertSpec], company: str, settings: Settings, secrets: Iterable[str]) -> None:
    """SpecError listing each alert whose secret the company lacks or whose host the host rules refuse.

    A host given as an address is judged here; a name is judged again when it is resolved, at each send.
    """
    from firefeed.suggest import did_you_mean

    have = set(secrets)
    problems: list[SpecError] = []
    for i, alert in enumerate(alerts):
        if alert.secret not in have:
            hint = did_you_mean(alert.secret, have)
            problems.append(
                SpecError(
                    f"alerts[{i}].secret",
                    f"company {company!r} has no secret {alert.secret!r}{hint}: set it with "
                    f"`firefeed secret set --company {company} {alert.secret}` or PUT /api/secrets/{alert.secret}",
                )
            )
        try:
            check_host(alert.url, settings)
        except UnsafeURLError as err:
            problems.append(SpecError(f"alerts[{i}].url", err.reason))
    if problems:
        raise SpecError.of(problems)


def check_host(url: str, settings: Settings) -> None:
    """UnsafeURLError for an alert URL whose host the fetcher's rules refuse without resolving it:
    a non-public address, `localhost`, unless FIREFEED_FETCH_ALLOW_PRIVATE or _ALLOWED_HOSTS allows it."""
    from firefeed.pipeline._netguard import check_url_host, host_is_exempt, metadata_range, parse_address, special_range

    check_url_host("alert", url)
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    if host_is_exempt(host, settings):
        return
    address = parse_address(host)
    if address is None:
        if host != "localhost" and not host.endswith(".localhost"):
            return  # a name: judged by every address it resolves to, when an alert is sent
        if settings.fetch_allow_private:
            return
        raise UnsafeURLError(
            "alert", f"host {host!r} is this machine; set FIREFEED_FETCH_ALLOWED_HOSTS or FIREFEED_FETCH_ALLOW_PRIVATE"
        )
    special = metadata_range(address) if settings.fetch_allow_private else special_range(address)
    if special is not None:
        lift = (
            "FIREFEED_FETCH_ALLOW_PRIVATE does not allow it; name the host in FIREFEED_FETCH_ALLOWED_HOSTS"
            if settings.fetch_allow_private
            else "set FIREFEED_FETCH_ALLOWED_HOSTS or FIREFEED_FETCH_ALLOW_PRIVATE to allow it"
        )
        raise UnsafeURLError("alert", f"address {host} is a non-public address ({special}); {lift}")
