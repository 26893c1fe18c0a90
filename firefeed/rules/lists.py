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

    def without(self, name: str) -> ListFields:
        """These list fields but `name`: inside a `remove` condition `_` is the element, one text (P20),
        even when the project also has a list field called `_`."""
        if name not in self.fields:
            return self
        return ListFields(self.fields - {name}, self.declared - {name})


NO_LISTS = ListFields()
