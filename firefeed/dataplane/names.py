"""The names of the tables a run makes: pass tables, groups tables, export diff tables and kept results.

Every run-scoped name carries its run id (dashes dropped), so the janitor can tell a table's owner
from its name alone and a reader of one run's result never reads another's. The project's own tables
(items, staging, lookups, published keys) are named in firefeed/schema/identifiers.py.
"""

from __future__ import annotations

import re

RULES_TMP_PREFIX = "rules_tmp_"


def rules_tmp_table(run_id: str, pass_no: int) -> str:
    """A rules pass table; the run id is in the name so the janitor can tell its owner."""
    return f"{RULES_TMP_PREFIX}{run_id.replace('-', '')}_{pass_no}"


def rules_groups_table(run_id: str, pass_no: int) -> str:
    """The groups a grouped pass joins (one row per group); run-scoped like the pass tables."""
    return f"{rules_tmp_table(run_id, pass_no)}_g"


def is_rules_groups_table(name: str) -> bool:
    """Whether `name` is one `rules_groups_table` gives."""
    return name.startswith(RULES_TMP_PREFIX) and name.endswith("_g")


EXPORT_TMP_PREFIX = "export_tmp_"


def export_tmp_table(run_id: str, index: int) -> str:
    """The (key, content hash) table one export of a run writes for its diff; run-scoped like a pass table."""
    return f"{EXPORT_TMP_PREFIX}{run_id.replace('-', '')}_{index}"


#: what a succeeded run keeps of its rules' result for `firefeed values` (SPEC P33): its pass tables, renamed
RESULT_PREFIX = "result_"


def kept_result_table(run_id: str) -> str:
    """The rules' result a succeeded run keeps (a table, or a view of the run's tables kept with it).

    The run id is in the name, so a reader asking for its run's result never reads another's."""
    return f"{RESULT_PREFIX}{run_id.replace('-', '')}"


def kept_part_table(pass_table: str) -> str:
    """The name a run's pass table (or pass view, or groups table) that its kept result reads is kept under."""
    assert pass_table.startswith(RULES_TMP_PREFIX), pass_table
    return RESULT_PREFIX + pass_table[len(RULES_TMP_PREFIX) :]


def tmp_table_number(table: str) -> int | None:
    """The number at the end of a `rules_tmp_*` / `export_tmp_*` name (a pass, a part, an export); None for
    a groups table and any other name."""
    last = table.rsplit("_", 1)[-1]
    return int(last) if last.isdigit() and run_id_of_tmp_table(table) is not None else None


def run_id_of_tmp_table(table: str) -> str | None:
    """The run id a `rules_tmp_*` or `export_tmp_*` table belongs to, or None when the name is not ours."""
    m = re.match(rf"^(?:{RULES_TMP_PREFIX}|{EXPORT_TMP_PREFIX})([0-9a-f]{{32}})_\d+(?:_g)?$", table)
    if not m:
        return None
    h = m.group(1)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
