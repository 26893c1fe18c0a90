"""What the sync engine asks of a channel's API client (SPEC 10 C9-C10), and what it gets back.

The engine (ledger, planning, pacing, retries) knows nothing of a channel's wire format; a client
(`google_merchant.py`, `meta_catalog.py`) knows nothing of the ledger. The engine hands a client
operations, at most `limits.max_batch` at a time (Google takes one product per request, Meta up to
5,000 items and 28 MB per batch), and reads back one outcome per operation, in any order, keyed by
the operation's key. A client never raises for one item's refusal: that is an outcome. An optional attribute
it cannot put in the channel's form is left out of the item, which is sent, and named in `Outcome.left_out`;
only a required one (the client's `REQUIRED`) keeps the item from being sent. It raises
`ChannelBusy` (a quota or 5xx answer: the engine backs off and sends the same operations again) or
`ChannelDown` (credentials refused, the account unknown: the engine stops the sync and reports it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class Op(StrEnum):
    INSERT = "insert"  # an added or changed item, or a resend before the channel expires it
    DELETE = "delete"  # an item no longer in the export


@dataclass(frozen=True)
class Operation:
    key: str  # the item's channel id (Google offerId, Meta retailer id): the export's `id` value, else its key
    op: Op
    #: the item as the export writes it, output column name -> value, in the export's column order
    #: (a list column is a list); None for a delete
    item: dict[str, Any] | None = None


@dataclass(frozen=True)
class Outcome:
    key: str
    ok: bool
    #: the channel's code and message for a refused item ("" when ok); shown as-is, never a secret
    code: str = ""
    message: str = ""
    #: a transient per-item failure worth sending again (a 5xx for that item); False for a refusal
    retry: bool = False
    #: (column, why) of each optional attribute the client could not put in the channel's form: the item was
    #: sent without it (and the channel holds none), the merchant is told which and why
    left_out: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Issue:
    """One issue the channel reports for a product it holds ("google says")."""

    code: str
    severity: str  # "error" (disapproved / not shown), "warning", "info"
    attribute: str = ""
    message: str = ""


@dataclass(frozen=True)
class RemoteItem:
    """A product as the channel holds it (from its list call), for `sync repair` and the statuses."""

    key: str
    #: the channel's copy of the attributes, normalised by the client to the export's column names
    #: where it can map them, so the engine can compare them with the ledger's item
    item: dict[str, Any]
    issues: tuple[Issue, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Limits:
    max_batch: int  # operations per `send` call
    max_batch_bytes: int | None = None  # Meta: 28 MB per call


class ChannelBusy(Exception):
    """Quota or server trouble for the whole call: send the same operations again after `retry_after`."""

    def __init__(self, message: str, retry_after: float | None = None, quota: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.quota = quota


class ChannelDown(Exception):
    """The channel refuses the sync itself (credentials, account, catalog): stop and report it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ChannelClient(Protocol):
    name: str  # "google-merchant" | "meta-catalog"
    limits: Limits

    def send(self, ops: Sequence[Operation]) -> list[Outcome]:
        """Send the operations (one call for Meta, one request each for Google, made by the caller's
        threads: `send` with one operation must be safe to call from several threads at once); one
        outcome per operation. A delete of a product the channel does not hold is ok."""
        ...

    def list_items(self) -> Iterator[RemoteItem]:
        """Every product the channel holds for this account/data source (or catalog), page by page."""
        ...

    def close(self) -> None: ...
