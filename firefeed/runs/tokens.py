"""API bearer tokens: each one bound to one company, stored only as its SHA-256.

A token is `ff_` + 32 random bytes (URL-safe base64). With 256 bits of entropy
nobody can guess or brute-force a token from its hash, so a fast hash is enough:
a slow password hash (bcrypt, argon2) protects low-entropy secrets people pick,
and would only add milliseconds to every API call. Because the hash is
deterministic, a token is looked up by its hash in one indexed query.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine

from firefeed.db.engine import get_engine, session_factory
from firefeed.db.models import ApiToken, Company

PREFIX = "ff_"
# The same shape a spec's `company` must have.
COMPANY_ID = re.compile(r"^[a-z0-9][a-z0-9_]{0,39}$")
_TOKEN_BYTES = 32
# A verified token is remembered this long so the hot paths (a 409 answer) need no extra query.
# Tokens are never revoked in place today; when they are, this bounds how long a revoked one lives on.
_CACHE_S = 30.0


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenStore:
    """Creates and verifies API tokens."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.sessions = session_factory(engine or get_engine())
        self._cache: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def create(self, company: str) -> str:
        """A new token for `company` (created when missing); the plaintext is returned once and never stored."""
        if not COMPANY_ID.match(company):
            raise ValueError(f"company {company!r} must match {COMPANY_ID.pattern}")
        token = PREFIX + secrets.token_urlsafe(_TOKEN_BYTES)
        with self.sessions() as s, s.begin():
            s.execute(pg_insert(Company).values(id=company).on_conflict_do_nothing())
            s.add(ApiToken(company_id=company, token_hash=hash_token(token), token_prefix=token[:10]))
        return token

    def cached(self, token: str) -> str | None:
        """The company of a token verified in the last seconds, without a query (None: ask `verify`)."""
        with self._lock:
            hit = self._cache.get(hash_token(token))
        return hit[0] if hit is not None and hit[1] > time.monotonic() else None

    def verify(self, token: str) -> str | None:
        """The company a token belongs to, or None for an unknown token."""
        if not token.startswith(PREFIX) or len(token) > 200:
            return None
        hit = self.cached(token)
        if hit is not None:
            return hit
        digest = hash_token(token)
        now = time.monotonic()
        with self.sessions() as s:
            company = s.execute(select(ApiToken.company_id).where(ApiToken.token_hash == digest)).scalar()
        if company is not None:
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (company, now + _CACHE_S)
        return company
