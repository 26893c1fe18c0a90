"""Per-company secrets in the control plane: set, list, delete, and resolve for a fetch.

Values are stored only encrypted (firefeed/secrets/crypto.py) and leave this
module only through `resolve`, which the fetch calls for the spec's own company.
No route or command reads a value back: a secret is set, replaced or deleted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine

from firefeed.config import Settings, get_settings
from firefeed.db.engine import get_engine, session_factory
from firefeed.db.models import Company, CompanySecret
from firefeed.errors import CompanyLimitError, NotFoundError
from firefeed.secrets.crypto import SecretCipher
from firefeed.secrets.references import SECRET_NAME, Resolver, origin_of

COMPANY_ID = re.compile(r"[a-z0-9][a-z0-9_]{0,39}")
# A header value or URL part: a JWT or an API key is a few kilobytes at most.
MAX_VALUE_CHARS = 16 * 1024
# Control characters would be refused in a header anyway; refusing them here says so at once.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class SecretInfo:
    """What may be shown about a secret: its name and when it was last set, never its value."""

    name: str
    created_at: datetime
    updated_at: datetime


def check_name(name: str) -> str:
    """`name` if it can be written as `${secret:NAME}`; ValueError saying what a name may be."""
    if not SECRET_NAME.fullmatch(name):
        raise ValueError(f"secret name {name!r} must be 1-64 letters, digits or _, not starting with a digit")
    return name


def check_value(value: str) -> str:
    """`value` if it can be sent in a header or a URL; ValueError that never quotes it."""
    if not value:
        raise ValueError("a secret's value must not be empty")
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"a secret's value must be at most {MAX_VALUE_CHARS} characters")
    if _CONTROL.search(value):
        raise ValueError("a secret's value must not hold a line break or another control character")
    return value


def _check_company(company: str) -> str:
    if not COMPANY_ID.fullmatch(company):
        raise ValueError(f"company {company!r} must match {COMPANY_ID.pattern}")
    return company


class SecretStore:
    """Reads and writes the company_secrets table; one short transaction per call."""

    def __init__(self, engine: Engine | None = None, settings: Settings | None = None) -> None:
        self.engine = engine or get_engine()
        self.sessions = session_factory(self.engine)
        self._settings = settings

    @property
    def settings(self) -> Settings:
        return self._settings or get_settings()

    def set(self, company: str, name: str, value: str) -> bool:
        """Create or replace a secret; True when it was created. ConfigError without FIREFEED_SECRETS_KEY;
        CompanyLimitError when it would be one more than FIREFEED_SECRETS_PER_COMPANY (replacing is fine)."""
        _check_company(company)
        check_name(name)
        check_value(value)
        stored = SecretCipher.from_settings(self.settings).encrypt(company, name, value)
        at = datetime.now(UTC)
        cap = self.settings.secrets_per_company
        with self.sessions() as s, s.begin():
            s.execute(pg_insert(Company).values(id=company).on_conflict_do_nothing())
            # One company's sets one at a time (FOR NO KEY UPDATE: no foreign-key check waits for it), so two
            # new names at once cannot both see room for one more.
            s.execute(select(Company.id).where(Company.id == company).with_for_update(key_share=True))
            held = s.execute(
                select(func.count())
                .select_from(CompanySecret)
                .where(CompanySecret.company_id == company, CompanySecret.name != name)
            ).scalar_one()
            if held >= cap:
                raise CompanyLimitError(
                    f"company {company!r} already has {held} secrets, the most FIREFEED_SECRETS_PER_COMPANY={cap} "
                    f"allows: secret {name!r} was not set; delete one it no longer uses first"
                )
            upsert = pg_insert(CompanySecret).values(
                company_id=company, name=name, ciphertext=stored, created_at=at, updated_at=at
            )
            row = s.execute(
                upsert.on_conflict_do_update(
                    index_elements=[CompanySecret.company_id, CompanySecret.name],
                    set_={"ciphertext": stored, "updated_at": at},
                ).returning(CompanySecret.created_at)
            ).one()
        return bool(row.created_at == at)

    def list(self, company: str) -> list[SecretInfo]:
        """The company's secrets by name (no key needed: nothing is decrypted)."""
        with self.sessions() as s:
            rows = s.execute(
                select(CompanySecret.name, CompanySecret.created_at, CompanySecret.updated_at)
                .where(CompanySecret.company_id == company)
                .order_by(CompanySecret.name)
            ).all()
        return [SecretInfo(name=r.name, created_at=r.created_at, updated_at=r.updated_at) for r in rows]

    def delete(self, company: str, name: str) -> None:
        """Forget a secret; NotFoundError when the company has none of that name."""
        with self.sessions() as s, s.begin():
            gone = s.execute(
                delete(CompanySecret)
                .where(CompanySecret.company_id == company, CompanySecret.name == name)
                .returning(CompanySecret.name)
            ).first()
        if gone is None:
            raise NotFoundError(f"company {company!r} has no secret {name!r}")

    def resolve(self, company: str, name: str) -> str | None:
        """The value of one of the company's secrets, or None; ConfigError when the key can't open it."""
        with self.sessions() as s:
            stored = s.execute(
                select(CompanySecret.ciphertext).where(CompanySecret.company_id == company, CompanySecret.name == name)
            ).scalar()
        if stored is None:
            return None
        return SecretCipher.from_settings(self.settings).decrypt(company, name, stored)


def resolver_for(company: str, spec_dir: Path | str | None, *, settings: Settings, engine: Engine) -> Resolver:
    """The Resolver a spec of `company` is fetched with: its own secrets, and the environment if the CLI applied it."""
    store = SecretStore(engine, settings)
    return Resolver(
        company=company,
        origin=origin_of(spec_dir),
        env_allow=settings.spec_env_allow,
        secret=lambda name: store.resolve(company, name),
    )
