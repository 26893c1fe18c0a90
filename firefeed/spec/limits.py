"""What one spec may hold: sources, lookups, exports and fields, each a setting (#47).

Every source and lookup is fetched, parsed and staged at every run, every export is a job and a
file, and every field a rule writes or an export names is a column of every item the export writes.
The growth bounds (rules/value_growth.py) bound each field on its own, so only their number keeps an
item small: 200 fields each templating the feed's values made a 10.7 KB feed write a 121 MB export.
These counts are the part of that bound the spec alone decides, checked when it is validated,
before any rule is planned; what the data makes of them is EXPORT's to bound (export/bounds.py).

The rules' own count (`spec_max_rules`) is checked with their actions in rules/limits.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from firefeed.errors import SpecError

if TYPE_CHECKING:
    from firefeed.config import Settings
    from firefeed.rules.model import Rule


def _settings() -> Settings:
    from firefeed.config import get_settings

    return get_settings()


def _refuse_past(path: str, what: str, count: int, setting: str, limit: int) -> None:
    if count > limit:
        raise SpecError(
            f"{path}[{limit}]",
            f"the spec holds {count} {what}; at most {limit} are supported ({setting})",
        )


def check_entry_counts(sources: Sequence[Any], lookups: Sequence[Any], exports: Sequence[Any]) -> None:
    """A SpecError naming the first source, lookup or export past its setting's count."""
    settings = _settings()
    _refuse_past("sources", "sources", len(sources), "spec_max_sources", settings.spec_max_sources)
    _refuse_past("lookups", "lookups", len(lookups), "spec_max_lookups", settings.spec_max_lookups)
    _refuse_past("exports", "exports", len(exports), "spec_max_exports", settings.spec_max_exports)


def check_export_fields(path: str, fields: Mapping[str, object] | None) -> None:
    """A SpecError when an export's `fields` names more than spec_max_fields columns."""
    limit = _settings().spec_max_fields
    if fields is not None and len(fields) > limit:
        name = list(fields)[limit]
        raise SpecError(
            f"{path}.fields",
            f"names {len(fields)} fields ({name!r} is number {limit + 1}); "
            f"at most {limit} are supported (spec_max_fields)",
        )


def check_written_fields(rules: Sequence[Rule], *, path: str = "rules", start: Sequence[str] = ()) -> list[str]:
    """The fields `rules` write after those in `start`, in order; a SpecError naming the first rule that
    writes one past spec_max_fields (a disabled rule counts: enabling it changes no bound)."""
    limit = _settings().spec_max_fields
    written: dict[str, None] = dict.fromkeys(start)
    for rule in rules:
        for name in rule.writes:
            if name in written:
                continue
            written[name] = None
            if len(written) > limit:
                where = "the project's and this export's rules together" if start else "the rules"
                raise SpecError(
                    f"{path}[{rule.index - 1}]",
                    f"rule {rule.name!r} writes {name!r}, field number {len(written)} that {where} write; "
                    f"at most {limit} are supported (spec_max_fields): each is a column of every item",
                )
    return list(written)
