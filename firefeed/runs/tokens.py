"""API bearer tokens: each one bound to one company, stored only as its SHA-256; they expire and are revoked.

Tokens are made by the operator (`firefeed token create`: a root, no parent) or by a company's own token over
the API (POST /api/tokens, the page's settings). A token minted over the API is bounded by the one that minted
it, so a leaked or retired token cannot leave descendants behind it:
- it records its parent (`parent_id`), and revoking a token revokes every token below it, transitively, in
  one recursive UPDATE in the revoke's transaction;
- it never expires after its parent (its expiry is the sooner of the one asked for and the parent's);
- only a live parent creates one: the parent is checked in the database inside the creating transaction, so
  a token revoked by another process is refused even where an API process still has it cached;
- a company holds at most FIREFEED_TOKENS_PER_COMPANY active tokens, whoever creates them.
Creates and revokes of one company take its `companies` row (FOR NO KEY UPDATE) first, so a child cannot be
created under a parent whose revoke is walking the tree at that moment (it would escape the walk), and two
creates at once cannot both see room for one more.

A token is `ff_` + 32 random bytes (URL-safe base64). With 256 bits of entropy
nobody can guess or brute-force a token from its hash, so a fast hash is enough:
a slow password hash (bcrypt, argon2) protects low-entropy secrets people pick,
and would only add milliseconds to every API call. Because the hash is
deterministic, a token is looked up by its hash in one indexed query.

A verified token is remembered for FIREFEED_TOKEN_CACHE_S (default 5 s) so the hot paths (a 409
under a burst) need no query. The entry keeps the token's expiry, so an expired token is refused at
once, cached or not. A revoked one is dropped from the cache of the process that revoked it at once
and is refused by every other API process within FIREFEED_TOKEN_CACHE_S, when its entry lapses
(nothing tells the other processes; a few seconds is the price of no query per request). A cascade reaches
them the same way: the revoking process forgets every token it revoked at once, the others within that time.
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

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, aliased

from firefeed.config import get_settings
from firefeed.db.engine import get_engine, session_factory
from firefeed.db.models import ApiToken, Company
from firefeed.errors import AuthenticationError, CompanyLimitError, NotFoundError

PREFIX = "ff_"
# The same shape a spec's `company` must have.
COMPANY_ID = re.compile(r"^[a-z0-9][a-z0-9_]{0,39}$")
_TOKEN_BYTES = 32
# `last_used_at` is written when a request verifies the token against the database and the stored
# time is older than this: a write a minute per token at most, never one per request.
_LAST_USED_STEP = timedelta(minutes=1)
# The longest expiry a token may be given (about a hundred years); longer: give none.
MAX_EXPIRES_IN = timedelta(days=36500)
# A token's name: a label shown as text (the page, the CLI list); one line, no control characters.
NAME_MAX = 100
# Control characters and line separators; lone surrogates too (no UTF-8 for them: Postgres would refuse).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def check_name(name: str | None) -> str | None:
    """The name to store: None for none or blank; ValueError past NAME_MAX characters or with a control
    character (a line break would forge rows in `firefeed token list`)."""
    if name is None or not name.strip():
        return None
    name = name.strip()
    if len(name) > NAME_MAX:
        raise ValueError(f"a token's name must be at most {NAME_MAX} characters, got {len(name)}")
    if _CONTROL.search(name):
        raise ValueError("a token's name must be one line of text, without control characters")
    return name


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def now() -> datetime:
    return datetime.now(UTC)


_TIMES = ("created_at", "expires_at", "revoked_at", "last_used_at")


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the company, and which of its tokens (the parent of any token it creates)."""

    company: str
    token_id: int


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
    parent_id: int | None
    """The token that created this one over the API; None: the operator's."""
    name: str | None

    def as_dict(self) -> dict[str, Any]:
        """As the API and `firefeed token list --json` show it: times as ISO 8601, null when unset."""
        return {
            "id": self.id,
            "prefix": self.prefix,
            "state": self.state,
            **{k: getattr(self, k) and getattr(self, k).isoformat() for k in _TIMES},
            "parent_id": self.parent_id,
            "name": self.name,
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
class Issued:
    """A token just created: the plaintext, shown once and never stored, and what may be shown of it."""

    token: str
    info: TokenInfo


@dataclass(frozen=True)
class Revoked:
    """A revoke's outcome: the token asked for, and the ids of the tokens below it revoked with it now."""

    info: TokenInfo
    descendants: list[int]


@dataclass(frozen=True)
class _Verified:
    company: str
    token_id: int
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
    ApiToken.parent_id,
    ApiToken.name,
)


def _lock_company(s: Session, company: str) -> None:
    """Take the company's row (created when missing) until the transaction ends: its token creates and
    revokes one at a time. FOR NO KEY UPDATE: no foreign-key check of another table waits for it."""
    s.execute(pg_insert(Company).values(id=company).on_conflict_do_nothing())
    s.execute(select(Company.id).where(Company.id == company).with_for_update(key_share=True))


class TokenStore:
    """Creates, verifies, lists and revokes API tokens."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.sessions = session_factory(engine or get_engine())
        self._cache: dict[str, _Verified] = {}
        self._lock = threading.Lock()

    def create(self, company: str, expires_in: timedelta | None = None, *, name: str | None = None) -> str:
        """A new root token for `company` (created when missing), valid for `expires_in` (None: until
        revoked); the plaintext is returned once and never stored."""
        return self.issue(company, expires_in, name=name).token

    def issue(
        self,
        company: str,
        expires_in: timedelta | None = None,
        *,
        parent_id: int | None = None,
        name: str | None = None,
    ) -> Issued:
        """A new token for `company`; with `parent_id`, one created by that token of the company's.

        Its expiry is the sooner of `expires_in` from now and the parent's (None for both: until revoked).
        ValueError for a bad company, expiry or name; AuthenticationError when the parent is revoked,
        expired or not the company's (it can create nothing); CompanyLimitError past
        FIREFEED_TOKENS_PER_COMPANY active tokens.
        """
        if not COMPANY_ID.match(company):
            raise ValueError(f"company {company!r} must match {COMPANY_ID.pattern}")
        if expires_in is not None and not timedelta(0) < expires_in <= MAX_EXPIRES_IN:
            raise ValueError(f"a token's expiry must be more than 0 and at most {MAX_EXPIRES_IN.days} days away")
        name = check_name(name)
        token = PREFIX + secrets.token_urlsafe(_TOKEN_BYTES)
        at = now()
        expires_at = at + expires_in if expires_in is not None else None
        cap = get_settings().tokens_per_company
        with self.sessions() as s, s.begin():
            _lock_company(s, company)
            if parent_id is not None:
                # Read after the company's lock: a revoke of the parent (or of a token above it) that
                # committed before is seen here, and one that comes after walks this token too.
                parent = s.execute(
                    select(ApiToken.expires_at).where(
                        ApiToken.id == parent_id,
                        ApiToken.company_id == company,
                        ApiToken.revoked_at.is_(None),
                        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > at),
                    )
                ).one_or_none()
                if parent is None:
                    raise AuthenticationError("the token sending this is revoked or expired: it can create no token")
                if parent.expires_at is not None and (expires_at is None or parent.expires_at < expires_at):
                    expires_at = parent.expires_at
            held = s.execute(
                select(func.count())
                .select_from(ApiToken)
                .where(
                    ApiToken.company_id == company,
                    ApiToken.revoked_at.is_(None),
                    or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > at),
                )
            ).scalar_one()
            if held >= cap:
                raise CompanyLimitError(
                    f"company {company!r} already has {held} active tokens, the most FIREFEED_TOKENS_PER_COMPANY="
                    f"{cap} allows: no token was created; revoke one it no longer uses first"
                )
            row = s.execute(
                pg_insert(ApiToken)
                .values(
                    company_id=company,
                    token_hash=hash_token(token),
                    token_prefix=token[:10],
                    expires_at=expires_at,
                    parent_id=parent_id,
                    name=name,
                )
                .returning(*_COLUMNS)
            ).one()
        return Issued(token=token, info=TokenInfo(*row))

    def cached(self, token: str) -> str | None:
        """The company of a token verified in the last seconds, without a query (None: ask `verify`)."""
        hit = self.cached_caller(token)
        return hit.company if hit else None

    def verify(self, token: str) -> str | None:
        """The company a token belongs to, or None for an unknown, expired or revoked token."""
        hit = self.identify(token)
        return hit.company if hit else None

    def cached_caller(self, token: str) -> Caller | None:
        """The caller of a token verified in the last seconds, without a query (None: ask `identify`).

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
        return Caller(hit.company, hit.token_id)

    def identify(self, token: str) -> Caller | None:
        """The company and id of a token, or None for an unknown, expired or revoked token."""
        if not token.startswith(PREFIX) or len(token) > 200:
            return None
        hit = self.cached_caller(token)
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
                self._cache[digest] = _Verified(row.company_id, row.id, row.expires_at, started + ttl)
        return Caller(str(row.company_id), int(row.id))

    def list(self, company: str) -> list[TokenInfo]:
        """The company's tokens, oldest first, revoked and expired ones included."""
        with self.sessions() as s:
            rows = s.execute(select(*_COLUMNS).where(ApiToken.company_id == company).order_by(ApiToken.id)).all()
        return [TokenInfo(*row) for row in rows]

    def page(self, company: str, offset: int, limit: int) -> tuple[tuple[TokenInfo, ...], int]:
        """`limit` of the company's tokens from `offset`, and how many it has: the active ones first, then
        the expired, then the revoked, each oldest first. Revoked tokens pile up without bound; the active
        ones (at most FIREFEED_TOKENS_PER_COMPANY) lead the first page, where a person looks for them."""
        at = now()
        rank = case(
            (ApiToken.revoked_at.is_not(None), 2),
            (and_(ApiToken.expires_at.is_not(None), ApiToken.expires_at <= at), 1),
            else_=0,
        )
        mine = ApiToken.company_id == company
        with self.sessions() as s:
            rows = s.execute(
                select(*_COLUMNS).where(mine).order_by(rank, ApiToken.id).offset(offset).limit(limit)
            ).all()
            total = s.execute(select(func.count()).select_from(ApiToken).where(mine)).scalar_one()
        return tuple(TokenInfo(*row) for row in rows), int(total)

    def revoke(self, company: str, token_id: int) -> Revoked:
        """Revoke one of the company's tokens and every token it created, transitively (again: nothing
        changes); NotFoundError for another's or none.

        This process refuses them at once; other API processes within FIREFEED_TOKEN_CACHE_S.
        """
        if not 0 < token_id < 2**63:  # not an id Postgres can hold (bigint): no such token, not a 500
            raise NotFoundError(f"company {company!r} has no token {token_id}")
        with self.sessions() as s, s.begin():
            # A create of this company waits for this transaction, so no child appears under the tree while
            # the UPDATE below walks it (its snapshot is taken after this lock).
            _lock_company(s, company)
            found = s.execute(
                select(ApiToken.token_hash).where(ApiToken.id == token_id, ApiToken.company_id == company)
            ).one_or_none()
            if found is None:
                raise NotFoundError(f"company {company!r} has no token {token_id}")
            below = aliased(ApiToken)
            tree = (
                select(ApiToken.id).where(ApiToken.id == token_id, ApiToken.company_id == company).cte(recursive=True)
            )
            # Below a revoked token every token is revoked already (a revoke takes the whole tree and a revoked
            # token creates nothing), so the walk skips them: it visits the live tokens, at most the company's
            # bound, however many revoked rows the company has piled up.
            tree = tree.union(
                select(below.id)
                .join(tree, below.parent_id == tree.c.id)
                .where(below.company_id == company, below.revoked_at.is_(None))
            )
            changed = s.execute(
                update(ApiToken)
                .where(ApiToken.id.in_(select(tree.c.id)), ApiToken.revoked_at.is_(None))
                .values(revoked_at=now())
                .returning(ApiToken.id, ApiToken.token_hash)
            ).all()
            row = s.execute(select(*_COLUMNS).where(ApiToken.id == token_id)).one()
        for digest in {found.token_hash, *(hit.token_hash for hit in changed)}:
            self._forget(digest)
        return Revoked(TokenInfo(*row), sorted(int(hit.id) for hit in changed if hit.id != token_id))

    def _forget(self, digest: str) -> None:
        with self._lock:
            self._cache.pop(digest, None)
