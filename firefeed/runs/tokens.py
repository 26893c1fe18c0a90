"""API bearer tokens: each one bound to one company, stored only as its SHA-256; they expire and are revoked.

A token is `ff_` + 32 random bytes (URL-safe base64). With 256 bits of entropy
nobody can guess or brute-force a token from its hash, so a fast hash is enough:
a slow password hash (bcrypt, argon2) protects low-entropy secrets people pick,
and would only add milliseconds to every API call. Because the hash is
deterministic, a token is looked up by its hash in one indexed query.

A verified token is remembered for FIREFEED_TOKEN_CACHE_S (default 5 s) so the hot paths (a 409
under a burst) need no query. The entry keeps the token's expiry, so an expired token is refused at
once, cached or not. A revoked one is dropped from the cache of the process that revoked it at once
and is refused by every other API process within FIREFEED_TOKEN_CACHE_S, when its entry lapses
(nothing tells the other processes; a few seconds is the price of no query per request).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine

from firefeed.config import get_settings
from firefeed.db.engine import get_engine, session_factory
from firefeed.db.models import ApiToken, Company
from firefeed.errors import NotFoundError

PREFIX = "ff_"
# The same shape a spec's `company` must have.
COMPANY_ID = re.compile(r"^[a-z0-9][a-z0-9_]{0,39}$")
_TOKEN_BYTES = 32
# `last_used_at` is written when a request verifies the token against the database and the stored
# time is older than this: a write a minute per token at most, never one per request.
_LAST_USED_STEP = timedelta(minutes=1)
# The longest expiry a token may be given (about a hundred years); longer: give none.
MAX_EXPIRES_IN = timedelta(days=36500)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def now() -> datetime:
    return datetime.now(UTC)


_TIMES = ("created_at", "expires_at", "revoked_at", "last_used_at")


@dataclass(frozen=True)
class TokenInfo:
    """What may be shown about a token: never the token, only the first characters of it."""

    id: int
    company: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        """As the API and `firefeed token list --json` show it: times as ISO 8601, null when unset."""
        return {
            "id": self.id,
            "prefix": self.prefix,
            "state": self.state,
            **{k: getattr(self, k) and getattr(self, k).isoformat() for k in _TIMES},
        }

    @property
    def state(self) -> str:
        """`active`, `expired` or `revoked`."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now():
            return "expired"
        return "active"


@dataclass(frozen=True)
class _Verified:
    company: str
    expires_at: datetime | None
    until: float  # time.monotonic() past which the database is asked again


_COLUMNS = (
    ApiToken.id,
    ApiToken.company_id,
    ApiToken.token_prefix,
    ApiToken.created_at,
    ApiToken.expires_at,
    ApiToken.revoked_at,
    ApiToken.last_used_at,
)


class TokenStore:
    """Creates, verifies, lists and revokes API tokens."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.sessions = session_factory(engine or get_engine())
        self._cache: dict[str, _Verified] = {}
        self._lock = threading.Lock()

    def create(self, company: str, expires_in: timedelta | None = None) -> str:
        """A new token for `company` (created when missing), valid for `expires_in` (None: until revoked);
        the plaintext is returned once and never stored."""
        if not COMPANY_ID.match(company):
            raise ValueError(f"company {company!r} must match {COMPANY_ID.pattern}")
        if expires_in is not None and not timedelta(0) < expires_in <= MAX_EXPIRES_IN:
            raise ValueError(f"a token's expiry must be more than 0 and at most {MAX_EXPIRES_IN.days} days away")
        token = PREFIX + secrets.token_urlsafe(_TOKEN_BYTES)
        expires_at = now() + expires_in if expires_in is not None else None
        with self.sessions() as s, s.begin():
            s.execute(pg_insert(Company).values(id=company).on_conflict_do_nothing())
            s.add(
                ApiToken(
                    company_id=company, token_hash=hash_token(token), token_prefix=token[:10], expires_at=expires_at
                )
            )
        return token

    def cached(self, token: str) -> str | None:
        """The company of a token verified in the last seconds, without a query (None: ask `verify`).

        An entry whose token has expired since is dropped: the token is refused at once.
        """
        digest = hash_token(token)
        with self._lock:
            hit = self._cache.get(digest)
        if hit is None or hit.until <= time.monotonic():
            return None
        if hit.expires_at is not None and hit.expires_at <= now():
            self._forget(digest)
            return None
        return hit.company

    def verify(self, token: str) -> str | None:
        """The company a token belongs to, or None for an unknown, expired or revoked token."""
        if not token.startswith(PREFIX) or len(token) > 200:
            return None
        hit = self.cached(token)
        if hit is not None:
            return hit
        digest = hash_token(token)
        started = time.monotonic()
        at = now()
        with self.sessions() as s:
            row = s.execute(
                select(ApiToken.id, ApiToken.company_id, ApiToken.expires_at, ApiToken.last_used_at).where(
                    ApiToken.token_hash == digest,
                    ApiToken.revoked_at.is_(None),
                    or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > at),
                )
            ).one_or_none()
        if row is None:
            self._forget(digest)
            return None
        if row.last_used_at is None or row.last_used_at < at - _LAST_USED_STEP:
            with self.sessions() as s, s.begin():
                s.execute(update(ApiToken).where(ApiToken.id == row.id).values(last_used_at=at))
        ttl = get_settings().token_cache_s
        if ttl > 0:
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = _Verified(row.company_id, row.expires_at, started + ttl)
        return str(row.company_id)

    def list(self, company: str) -> list[TokenInfo]:
        """The company's tokens, oldest first, revoked and expired ones included."""
        with self.sessions() as s:
            rows = s.execute(select(*_COLUMNS).where(ApiToken.company_id == company).order_by(ApiToken.id)).all()
        return [TokenInfo(*row) for row in rows]

    def revoke(self, company: str, token_id: int) -> TokenInfo:
        """Revoke one of the company's tokens (again: nothing changes); NotFoundError for another's or none.

        This process refuses it at once; other API processes within FIREFEED_TOKEN_CACHE_S.
        """
        if not 0 < token_id < 2**63:  # not an id Postgres can hold (bigint): no such token, not a 500
            raise NotFoundError(f"company {company!r} has no token {token_id}")
        with self.sessions() as s, s.begin():
            found = s.execute(
                select(ApiToken.token_hash, ApiToken.revoked_at)
                .where(ApiToken.id == token_id, ApiToken.company_id == company)
                .with_for_update()
            ).one_or_none()
            if found is None:
                raise NotFoundError(f"company {company!r} has no token {token_id}")
            if found.revoked_at is None:
                s.execute(update(ApiToken).where(ApiToken.id == token_id).values(revoked_at=now()))
            row = s.execute(select(*_COLUMNS).where(ApiToken.id == token_id)).one()
        self._forget(found.token_hash)
        return TokenInfo(*row)

    def _forget(self, digest: str) -> None:
        with self._lock:
            self._cache.pop(digest, None)
