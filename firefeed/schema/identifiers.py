"""The one identifier helper: every schema, table and column name reaches SQL through here.

Feed field names are user input (quotes, `;`, unicode, 200 characters, SQL
keywords). They are mapped to stable column names that fit Postgres' 63-byte
identifier limit and never collide with FireFeed's own `_ff_` columns, then
quoted by psycopg2.sql.Identifier.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from psycopg2 import sql

MAX_IDENT_BYTES = 63
INTERNAL_PREFIX = "_ff_"
#: position of an item in the feed order (primary order, then appended ones)
ORD = "_ff_ord"
#: the item's key after trimming white space, what sources are joined on
KEY = "_ff_key"
#: the source that brought an item (0 = primary)
SRC = "_ff_src"

_COMPANY_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,39}$")
_PROJECT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def ident(*parts: str) -> sql.Identifier:
    """Quote a (possibly schema-qualified) identifier; the only way names enter SQL."""
    for part in parts:
        if not part or len(part.encode("utf-8")) > MAX_IDENT_BYTES or "\x00" in part:
            raise ValueError(f"not a usable identifier: {part!r}")
    return sql.Identifier(*parts)


def _digest(text: str, n: int = 10) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def _cut_utf8(text: str, max_bytes: int) -> str:
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


def column_for_field(field: str) -> str:
    """The column that stores `field`: the name itself when it fits, else a stable short form.

    A name that is too long, or that starts like an internal column, becomes
    `_ffx<hash>_<readable prefix>`; the item keeps its original field name.
    """
    if len(field.encode("utf-8")) <= MAX_IDENT_BYTES and not field.startswith("_ff") and field:
        return field
    tag = f"_ffx{_digest(field)}_"
    return tag + _cut_utf8(field, MAX_IDENT_BYTES - len(tag))


def check_company_id(company: str) -> str:
    if not _COMPANY_RE.match(company):
        raise ValueError(f"company id {company!r} must match [a-z0-9][a-z0-9_]{{0,39}}")
    return company


def check_project_id(project: str) -> str:
    if not _PROJECT_RE.match(project):
        raise ValueError(f"project id {project!r} must match [A-Za-z0-9][A-Za-z0-9_-]{{0,63}}")
    return project


#: schemas of companies' data: `company_<company id>`
COMPANY_SCHEMA_PREFIX = "company_"
#: schemas of scratch areas: throwaway copies of the data plane (rule previews), never a company's
SCRATCH_SCHEMA_PREFIX = "scratch_"
_SCRATCH_AREA = re.compile(r"^scratch:([0-9]{10}_[0-9a-f]{16})$")


def scratch_area(created_at: int, token: str) -> str:
    """The id of a scratch area: it stands where a company id goes, so the pipeline's own code works in it.

    `scratch:<unix seconds>_<16 hex>` can never be a company id (no `:` allowed), and its schema
    `scratch_<unix seconds>_<16 hex>` never starts with `company_`, so nothing in it is a company's.
    The creation time in the name lets the janitor drop areas a crashed preview left behind.
    """
    area = f"scratch:{created_at:010d}_{token}"
    if not _SCRATCH_AREA.match(area):
        raise ValueError(f"not a scratch area id: {area!r}")
    return area


def is_scratch_area(company: str) -> bool:
    return _SCRATCH_AREA.match(company) is not None


def company_schema(company: str) -> str:
    """The schema of a company's data (`company_<id>`), or of a scratch area (`scratch_<...>`)."""
    scratch = _SCRATCH_AREA.match(company)
    if scratch is not None:
        return SCRATCH_SCHEMA_PREFIX + scratch.group(1)
    return COMPANY_SCHEMA_PREFIX + check_company_id(company)


def _bounded(prefix: str, name: str) -> str:
    full = prefix + name
    if len(full.encode("utf-8")) <= MAX_IDENT_BYTES:
        return full
    tag = "_" + _digest(full, 8)
    return _cut_utf8(full, MAX_IDENT_BYTES - len(tag)) + tag


def project_table(project: str) -> str:
    """The table holding a project's merged items."""
    return _bounded("items_", check_project_id(project))


def staging_table(project: str, source: str) -> str:
    """The table holding one source's parsed rows (kept between runs for not-modified sources)."""
    return _bounded("stg_", f"{check_project_id(project)}_{_digest(source, 8)}")


def previous_staging_table(project: str, source: str) -> str:
    """The rows an enrich source was staged with before its last parse, kept for the delta to compare
    (dataplane/staged.py). Its prefix is no other table's: `stg_` + a project starting with `p_` reads
    `stg_p_…`, never `stgp_…`."""
    return _bounded("stgp_", f"{check_project_id(project)}_{_digest(source, 8)}")


def lookup_table(project: str, lookup: str) -> str:
    """The table of a lookup's rows, one per key (SPEC 9): the rules join it; rebuilt by each run."""
    return _bounded("lkp_", f"{check_project_id(project)}_{_digest(lookup, 8)}")


def lookup_staging_table(project: str, lookup: str) -> str:
    """The table a lookup's file is parsed into, as a source's is (`lookup_table` is built from it).

    Its prefix is no `stg_` name's: `stg_lkp_` made project `shop`'s lookup `x` the staging of
    project `lkp_shop`'s source `x`, which each run of `shop` dropped (a project id may hold `_`)."""
    return _bounded("stgl_", f"{check_project_id(project)}_{_digest(lookup, 8)}")


#: the prefixes of a project's tables that its spec's sources and lookups name (`staging_table`,
#: `lookup_staging_table`, `previous_staging_table`, `lookup_table`); `stg_lkp_` is the lookup
#: staging name before `stgl_`
PROJECT_FILE_PREFIXES = ("stg_", "stgl_", "stgp_", "lkp_")
LEGACY_LOOKUP_STAGING_PREFIX = "stg_lkp_"


def project_file_table(table: str, project: str, prefixes: Sequence[str] = PROJECT_FILE_PREFIXES) -> bool:
    """Whether `table` is `<prefix><project>_<8 hex>` for one of `prefixes`: a table a source or lookup of
    `project` was staged or keyed in, whatever its name. Names at the identifier limit are never
    claimed: `_bounded` cut another, longer project's name there, which could read as this one's."""
    if len(table.encode("utf-8")) >= MAX_IDENT_BYTES:
        return False
    return any(re.fullmatch(re.escape(prefix + project) + "_[0-9a-f]{8}", table) for prefix in prefixes)


def published_keys_table(project: str, export: str) -> str:
    """The (key, content hash) table of an export's last published file: what the next run diffs against."""
    return _bounded("export_keys_", f"{check_project_id(project)}_{_digest(export, 8)}")


def checked_keys_table(project: str, export: str) -> str:
    """An export's run table kept after a run was blocked before publishing (#49): what its findings list reads.

    A later publish of the export drops it (the published table is then the newer one).
    """
    return _bounded("export_checked_", f"{check_project_id(project)}_{_digest(export, 8)}")


def sync_ledger_table(project: str, export: str) -> str:
    """An export's sync ledger (SPEC 10 C10): each item's last operation sent to its channel and the answer."""
    return _bounded("sync_ledger_", f"{check_project_id(project)}_{_digest(export, 8)}")
