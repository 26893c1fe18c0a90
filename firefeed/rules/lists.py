"""Which fields hold lists (SPEC 9), decided once per project from its spec, never from the data.

A field is a *list field* when a source declares it in `lists`, or when an
enabled rule makes it one: the target of `split`, or of `copy` from a list
field. Every value of a list field is a Postgres `text[]` (no elements: `{}`),
in the items table and in every rules pass table; every other field is text,
exactly as before section 9. `declared` keeps the fields a source declares,
which is what `append`/`prepend` ask (P12). See docs/lists.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ListFields:
    """The project's list fields: every one (`fields`) and those a source declares (`declared`)."""

    fields: frozenset[str] = frozenset()
    declared: frozenset[str] = frozenset()

    def __contains__(self, name: object) -> bool:
        return name in self.fields

    def __bool__(self) -> bool:
        return bool(self.fields)


NO_LISTS = ListFields()
