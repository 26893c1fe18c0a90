"""An export's sync ledger (SPEC 10 C10): what each item's last operation was, and what the channel answered.

One table per export with `sync`, in the company's schema (`sync_ledger_table`): key `k` (primary key),
`kh`, `h` (the content hash last planned), `op` (insert / delete), `kind` (new / changed / resend /
repair / delete: what the report counts it as), `status` (pending / sending / acked / failed),
`attempts`, the channel's `code` and `message`, `sent_at`, `acked_at`, `inserted_at` (when the
channel first took the item), `issues` (its itemLevelIssues when the sync last listed it), and
`left_out` (the optional attributes the acked insert went without, unreadable: [{attribute, message}]).

Planning is a few set statements against the export's published table (no item goes through
Python): an insert for a key that is new, whose hash changed, or acked longer ago than the resend
age; a delete for a key the export no longer sends. Sending claims a block of pending rows as
`sending` and commits that before any request leaves; the answers turn them `acked` or `failed`.
So a killed worker leaves only its in-flight rows `sending`, and the next sync (holding the
account's lock, so no other sync is sending them) sends exactly the rows not acked.

An item goes to the channel under the export's `id` value (its key when the export writes none), as the export's
file names it; `cid` keeps the id each row's operation sends (NULL: the key, in a ledger made before #51). An
item the channel holds under another id moves: it is inserted under the new one and the old one deleted (a
row of its own, `RETIRED`), unless another item of the export uses it now.

Every statement is in queries.sql; this module only fills in the two table names and binds values.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from firefeed.db.sqlfile import load_queries
from firefeed.schema.identifiers import company_schema, ident, published_keys_table, sync_ledger_table
from firefeed.sync.channel import Op, Outcome

#: The first character of a ledger row that is no item of the export: the delete of a channel id no item uses any
#: longer (its `cid`: an item moved to another id, or a repair's orphan); a control character, which no channel
#: takes in an id.
RETIRED = "\x1f"


def _query(name: str) -> str:
    return load_queries("firefeed.sync")[name]


@dataclass(frozen=True)
class Claimed:
    """A claimed operation: its key, op, the kind the report counts it as, and its payload (inserts)."""

    key: str
    op: Op
    kind: str
    attempts: int
    values: list[Any] | None
    #: an insert a newer publish changed since it was planned: not sent by this sync (see `claim` in queries.sql)
    stale: bool = False
    #: the id the channel knows the item by: the export's `id` value, or the key (see queries.sql)
    cid: str = ""


@dataclass
class Tally:
    """What the answers of one sync did, for the report."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    failed: int = 0

    def add(self, op: str, kind: str, ok: bool) -> None:
        if not ok:
            self.failed += 1
        elif op == Op.DELETE:
            self.deleted += 1
        elif kind == "new":
            self.inserted += 1
        else:
            self.updated += 1


def _left_out_doc(outcome: Outcome) -> str:
    """An acked insert's attributes left out, as the ledger's `left_out` stores them ("" for none)."""
    if not (outcome.ok and outcome.left_out):
        return ""
    return json.dumps([{"attribute": a, "message": m} for a, m in outcome.left_out], ensure_ascii=False)


class Ledger:
    """The statements of one export's ledger, on the caller's psycopg2 connection (the caller commits)."""

    def __init__(self, conn: Any, company: str, project: str, export: str) -> None:
        self.conn = conn
        self.project = project
        self.export = export
        self.company = company
        self.schema = company_schema(company)
        self.table = sync_ledger_table(project, export)
        self.published = published_keys_table(project, export)
        index = "sync_k_" + hashlib.sha256(self.published.encode()).hexdigest()[:24]
        self._names = {
            "ledger": ident(self.schema, self.table),
            "published": ident(self.schema, self.published),
            "index": ident(index),
        }

    def _sql(self, name: str) -> sql.Composed:
        return sql.SQL(_query(name)).format(**self._names)

    def _run(self, name: str, params: dict[str, Any] | None = None) -> Any:
        cur = self.conn.cursor()
        cur.execute(self._sql(name), params or {})
        return cur

    def drop(self) -> None:
        """Forget the ledger (its sync now goes to another account, data source or catalog)."""
        self.conn.cursor().execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._names["ledger"]))

    def exists(self) -> bool:
        """Whether the ledger table is there (a sync that never held the account's lock made none)."""
        cur = self.conn.cursor()
        cur.execute("SELECT to_regclass(%(t)s) IS NOT NULL", {"t": self._names["ledger"].as_string(self.conn)})
        return bool(cur.fetchone()[0])

    def has_published(self) -> bool:
        """Whether the export has a published table (a run published it with its payloads)."""
        cur = self.conn.cursor()
        cur.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_schema = %(s)s AND table_name = %(t)s AND column_name = 'j'",
            {"s": self.schema, "t": self.published},
        )
        return bool(cur.fetchone()[0])

    # -- planning
    def plan(self, *, resend_s: float, max_attempts: int, id_at: int = -1) -> None:
        """Pending inserts and deletes from the published table (one transaction with the caller's commit).

        A failed insert goes again only when it changed, or when it failed after `max_attempts` tries: a
        transient per-item failure (no answer in time, a 502 for it, a Meta batch unconfirmed) that outlasted
        one sync is not the channel's refusal; a refusal (answered at an earlier attempt) waits for a change.

        `id_at`: the position of the export's `id` column in a payload (-1: none): an item goes to the channel under
        that value, as the export's file names it; an item the channel holds under another id (its key, sent
        before the channel id was the export's) is inserted under the new one and the old one deleted."""
        ids = {"id_at": id_at}
        self._run("published_index")
        self._run("plan_unretire", ids)
        self._run("plan_inserts", {"resend_s": resend_s, "max_attempts": max_attempts, **ids})
        self._run("plan_deletes", ids)

    def reset_sending(self) -> int:
        return int(self._run("reset_sending").rowcount)

    # -- sending
    def claim(self, n: int) -> list[Claimed]:
        rows = self._run("claim", {"n": n}).fetchall()
        return [
            Claimed(str(k), Op(op), str(kind), int(n), list(j) if j is not None else None, bool(stale), str(cid))
            for k, op, kind, n, j, stale, cid in rows
        ]

    def answer(self, outcomes: Sequence[Outcome], tally: Tally) -> None:
        """Record the channel's answers (refusals included) and count them."""
        if not outcomes:
            return
        params = {
            "keys": [o.key for o in outcomes],
            "oks": [o.ok for o in outcomes],
            "codes": [o.code or "" for o in outcomes],
            "messages": [o.message or "" for o in outcomes],
            "left_outs": [_left_out_doc(o) for o in outcomes],
        }
        done = self._run("answer", params).fetchall()
        for _k, op, kind, ok in done:
            tally.add(str(op), str(kind), bool(ok))
        deleted = [str(k) for k, op, _kind, ok in done if ok and op == Op.DELETE]
        if deleted:
            self._run("drop_deleted", {"keys": deleted})

    def requeue(self, keys: Sequence[str], *, uncount: bool) -> None:
        """Back to pending (`uncount`: the try did not reach the item: a busy channel refused the whole call)."""
        if keys:
            self._run("requeue", {"keys": list(keys), "uncount": 1 if uncount else 0})

    # -- what it holds
    def counts(self) -> dict[str, dict[str, int]]:
        """{op: {status: n}}."""
        found: dict[str, dict[str, int]] = {}
        for op, status, n in self._run("counts").fetchall():
            found.setdefault(str(op), {})[str(status)] = int(n)
        return found

    def left_out_count(self) -> int:
        """Items the channel holds without an optional attribute FireFeed could not read."""
        return int(self._run("left_out_count").fetchone()[0] or 0)

    def left_out_rows(self, n: int = 20) -> list[dict[str, str]]:
        """The first attributes left out: {key, attribute, message}."""
        return [
            {"key": str(k), "attribute": str(a), "message": str(m or "")}
            for k, a, m in self._run("left_out_rows", {"n": n}).fetchall()
        ]

    def failed_rows(self, n: int = 20) -> list[dict[str, str]]:
        return [
            {"key": str(k), "op": str(op), "code": str(code or ""), "message": str(message or "")}
            for k, op, code, message in self._run("failed_rows", {"n": n}).fetchall()
        ]

    # -- the channel's statuses
    def store_issues(self, items: Iterable[tuple[str, list[dict[str, str]]]]) -> None:
        batch = [{"k": k, "issues": issues} for k, issues in items]
        if batch:
            self._run("store_issues", {"items": json.dumps(batch)})

    def clear_unlisted_issues(self, since: Any) -> None:
        self._run("clear_unlisted_issues", {"since": since})

    def issue_summary(self) -> dict[str, Any]:
        """`channel_issues`: items with issues, how many of them FireFeed's checks flagged, counts by code."""
        codes = {str(code): int(n) for code, n in self._run("issue_codes").fetchall()}
        items, flagged = self._run("issue_items").fetchone()
        return {"items": int(items or 0), "flagged_by_firefeed": int(flagged or 0), "codes": codes}

    def issue_samples(self, n: int = 20) -> list[dict[str, Any]]:
        """The first `n` items the channel reports issues for, by key, with their issues."""
        return [{"key": str(k), "issues": list(v)} for k, v in self._run("issue_samples", {"n": n}).fetchall()]

    # -- repair
    def repair_begin(self) -> None:
        self._run("published_index")
        self._run("repair_remote_table")

    def repair_add(self, keys: Sequence[str], same: Sequence[bool]) -> None:
        if keys:
            self._run("repair_remote_add", {"keys": list(keys), "same": list(same)})

    def payloads(self, keys: Sequence[str]) -> dict[str, list[Any]]:
        return {str(k): list(j) for k, j in self._run("payloads", {"keys": list(keys)}).fetchall()}

    def repair_plan(self, *, delete_orphans: bool, list_orphans: int = 100) -> dict[str, Any]:
        missing, different = self._run("repair_counts").fetchone()
        # Counted and listed in part in the database: neither the orphans nor the resent keys come to Python whole.
        orphans = int(self._run("repair_orphan_count").fetchone()[0] or 0)
        orphan_keys = [str(r[0]) for r in self._run("repair_orphans", {"n": list_orphans}).fetchall()]
        resent = self._run("repair_resend").rowcount
        if delete_orphans and orphans:
            self._run("repair_delete_orphans")
        return {
            "missing": int(missing or 0),
            "different": int(different or 0),
            "resent": int(resent),
            "orphans": orphans,
            "orphan_keys": orphan_keys,
        }
