"""Whether Postgres returns a statement's rows in the order it reads its items' heaps, from its plan.

Items are stored in feed order, and every writer and reader of them (a rule pass's
CREATE TABLE AS, an export's COPY) relies on a plain sequential scan returning that
order instead of sorting a million wide rows. A statement that joins a groups table
(sqlgen._grouped) keeps it only with some plans: a hash of the groups probed by
each item read in order does; a hash of the items, a merge join or a hash join in
several batches does not. `keeps_order` reads the plan EXPLAIN gives for the
settings in force (`ORDER_SETTINGS`, in the caller's transaction) and says which.
"""

from __future__ import annotations

from typing import Any

from psycopg2 import sql

from firefeed.dataplane.names import is_rules_groups_table

#: plan nodes that may yield rows in another order than the scans that drive them
_REORDERING = {"Sort", "Incremental Sort", "Merge Join", "Merge Append", "Gather", "Gather Merge"}
#: joins driven by their inner side: a hash of the outer rows, probed in the inner side's order
_INNER_DRIVEN = {"Right", "Full", "Right Anti"}
#: a groups table up to this size may be hashed by a statement joining it (in one batch of ORDER_WORK_MEM,
#: hash_mem_multiplier 1 or more: about twice the table's size in memory); a larger one is probed or sorted
GROUPS_HASH_MAX_BYTES = 24 * 1024 * 1024
#: the groups tables one statement hashes, added up (each hash is kept to the statement's end: a COPY over a
#: view of many parts builds one per part): the statement's memory stays a bounded share of the server
GROUPS_HASH_TOTAL_BYTES = 64 * 1024 * 1024
ORDER_WORK_MEM = "64MB"
#: what a statement reading items in order runs under: joins hashed in one batch, never merged
ORDER_SETTINGS = (
    f"SET LOCAL work_mem = '{ORDER_WORK_MEM}'",
    "SET LOCAL enable_mergejoin = off",
    "SET LOCAL enable_nestloop = off",
)


def keeps_order(cur: Any, statement: sql.Composable | bytes, params: Any = None) -> bool:
    """Whether `statement`'s plan returns its rows in the order its heaps are read (`ordered_scans`)."""
    return ordered_scans(cur, statement, params, verbose=False) is not None


def ordered_scans(
    cur: Any, statement: sql.Composable | bytes, params: Any = None, *, verbose: bool = True
) -> list[tuple[str, str]] | None:
    """Whether Postgres plans `statement` (a SELECT) so that its rows come out in the order its heaps are read:
    down every driving branch of the plan (the outer side of a join, each member of an Append, in turn)
    nothing sorts or gathers, no join is driven by its inner side and no scan that drives it is a groups
    table; and every groups table the plan hashes fits GROUPS_HASH_MAX_BYTES (one batch: a hash join in
    batches yields its rows batch by batch), and all its hashes together GROUPS_HASH_TOTAL_BYTES.
    `statement` is composed SQL with `params`, or final bytes.

    When it does, the (schema, table) of each scan that drives it, in the order they are read: its rows
    come out in `_ff_ord` order when those heaps, read one after the other, are (the export's order check
    reads them, not the view over them, whose joins and expressions it does not need); a driving leaf
    that is not a table is ("", ""). Else None. The schemas need `verbose` (a larger plan: a pass's
    statement, which only needs the answer, is planned without it, and its scans' schemas are "").
    """
    explain = "EXPLAIN (FORMAT JSON, VERBOSE) " if verbose else "EXPLAIN (FORMAT JSON) "
    if isinstance(statement, bytes):
        cur.execute(explain.encode() + statement)
    else:
        cur.execute(sql.SQL(explain) + statement, params)
    doc = cur.fetchone()[0]
    root = (doc[0] if isinstance(doc, list) else doc)["Plan"]
    scans: list[tuple[str, str]] = []
    if not _driven_in_order(root, scans):
        return None
    hashed = _hashed_groups(root)
    if hashed:
        # A groups table's name holds its run's id: no other schema has one of that name.
        cur.execute(
            "SELECT relname, pg_relation_size(oid) FROM pg_class WHERE relname = ANY(%s) AND relkind = 'r'",
            (sorted(set(hashed)),),
        )
        size = dict(cur.fetchall())
        sizes = [int(size.get(name, 0)) for name in hashed]
        if max(sizes) > GROUPS_HASH_MAX_BYTES or sum(sizes) > GROUPS_HASH_TOTAL_BYTES:
            return None
    return scans


def _driven_in_order(node: dict[str, Any], scans: list[tuple[str, str]]) -> bool:
    """Whether `node` yields rows in the order of the scans that drive it, which are added to `scans`."""
    if node.get("Node Type") in _REORDERING or node.get("Join Type") in _INNER_DRIVEN:
        return False
    children = node.get("Plans", ())
    members = [c for c in children if c.get("Parent Relationship") == "Member"]
    if members:
        return all(_driven_in_order(m, scans) for m in members)  # an Append: each member, one after the other
    driving = [c for c in children if c.get("Parent Relationship") in ("Outer", "Subquery")]
    if driving:
        return _driven_in_order(driving[0], scans)
    name = node.get("Relation Name") or ""
    if is_rules_groups_table(name):
        return False
    scans.append((str(node.get("Schema") or ""), name) if name else ("", ""))
    return True


def _hashed_groups(root: dict[str, Any]) -> list[str]:
    """The name of the groups table of each scan under a Hash node of the plan `root` (a name per hash)."""
    found: list[str] = []
    stack = [(root, False)]
    while stack:
        node, hashed = stack.pop()
        hashed = hashed or node.get("Node Type") == "Hash"
        name = node.get("Relation Name") or ""
        if hashed and is_rules_groups_table(name):
            found.append(name)
        stack.extend((child, hashed) for child in node.get("Plans", ()))
    return found
