"""What an export's `sync:` may say (SPEC 10 C9): the channel API its items are pushed to after a publish.

Two channels, told apart by `to`:

    sync: {to: google-merchant, account: "123", data_source: "456", content_language: en,
           feed_label: IT, credentials: "${secret:GOOGLE_SA}"}
    sync: {to: meta-catalog, catalog: "789", token: "${secret:META_TOKEN}"}

The credential is always a `${secret:NAME}` reference, never the value: a spec is read by anyone who
can see the project, and the worker resolves the company's secret only when it sends (firefeed/sync).
Unknown keys are refused, so a typo (`acount`) is named at apply rather than silently ignored.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_ONE_SECRET = re.compile(r"^\$\{secret:([A-Za-z_][A-Za-z0-9_]{0,63})\}$")
#: The channel (exports[i].channel) whose checks and columns each sync target needs.
CHANNEL_OF = {"google-merchant": "google", "meta-catalog": "meta"}


def _secret_reference(v: str) -> str:
    if not _ONE_SECRET.match(v.strip()):
        raise ValueError('must name a company secret, "${secret:NAME}", never hold the value itself')
    return v.strip()


class _SyncBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @property
    def secret_name(self) -> str:
        """The company secret the worker resolves to authenticate (never stored, never reported)."""
        found = _ONE_SECRET.match(self.secret_reference)
        assert found is not None  # checked by the validator
        return found.group(1)

    @property
    def secret_reference(self) -> str:
        raise NotImplementedError

    @property
    def account_key(self) -> str:
        """What the channel's quota belongs to: one sync at a time per account (an advisory lock on it)."""
        raise NotImplementedError

    @property
    def ledger_key(self) -> str:
        """What an export's ledger describes: a sync pointed at another one starts with an empty ledger."""
        raise NotImplementedError


class GoogleMerchantSync(_SyncBase):
    """Merchant API products v1: one `productInputs:insert` per item, deletes through the data source."""

    to: Literal["google-merchant"]
    account: str = Field(min_length=1, max_length=64, pattern=r"^[0-9]+$")
    data_source: str = Field(min_length=1, max_length=64, pattern=r"^[0-9]+$")
    content_language: str = Field(min_length=2, max_length=8, pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,4})?$")
    feed_label: str = Field(min_length=1, max_length=20, pattern=r"^[A-Za-z0-9_-]+$")
    credentials: str

    @field_validator("credentials")
    @classmethod
    def _credentials(cls, v: str) -> str:
        return _secret_reference(v)

    @property
    def secret_reference(self) -> str:
        return self.credentials

    @property
    def account_key(self) -> str:
        return f"google-merchant:{self.account}"

    @property
    def ledger_key(self) -> str:
        # Deletes name the data source, and a product is (language, feed label, offer id) within it.
        return f"google-merchant:{self.account}/{self.data_source}/{self.content_language}/{self.feed_label}"


class MetaCatalogSync(_SyncBase):
    """Graph API `/{catalog}/items_batch`, answered with handles the client polls."""

    to: Literal["meta-catalog"]
    catalog: str = Field(min_length=1, max_length=64, pattern=r"^[0-9]+$")
    token: str

    @field_validator("token")
    @classmethod
    def _token(cls, v: str) -> str:
        return _secret_reference(v)

    @property
    def secret_reference(self) -> str:
        return self.token

    @property
    def account_key(self) -> str:
        return f"meta-catalog:{self.catalog}"

    @property
    def ledger_key(self) -> str:
        return self.account_key


SyncSpec = Annotated[GoogleMerchantSync | MetaCatalogSync, Field(discriminator="to")]
