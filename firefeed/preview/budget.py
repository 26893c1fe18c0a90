"""A preview's answer kept under FIREFEED_PREVIEW_MAX_ANSWER_BYTES: the items past the bound are cut, and it says so.

A value is capped where it is read (FIREFEED_PARSE_MAX_VALUE_CHARS) and the rules may make it at most
FIREFEED_RULES_MAX_GROWTH times that, so one item's changes stay bounded; a thousand such items are not.
Before the cap, one 20 MB value and a rule writing it eight times made a 160 MB answer and took the API
process to 717 MB. The answer's JSON is measured item by item as it is built, in feed order, and the
first item that would pass the bound ends the list (and every list after it): an answer is a prefix of
the sample, never a sample with holes. The answer's `cut` says how many items it shows of how many.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from pydantic import BaseModel

from firefeed.errors import PreviewRefusedError

#: what a list of the answer holds: items, or an export's rows
Entry = TypeVar("Entry", bound=BaseModel)

#: what the `cut` note's words, a float's spelling and JSON's punctuation may add beyond what is measured
_SLACK_BYTES = 512
#: and what the note may say of each list it cut (an export's name is at most 64 characters)
_SLACK_PER_LIST = 160


def json_bytes(model: BaseModel) -> int:
    """The model's size as the API answers it: compact JSON, UTF-8."""
    return len(model.__pydantic_serializer__.to_json(model))


class AnswerBudget:
    """What is left of the bound for items, once the answer without any item is measured."""

    def __init__(self, limit: int, bare: BaseModel, lists: int) -> None:
        """`bare` is the answer without items, `lists` how many lists of items it has (the project's, the
        exports')."""
        self.limit = limit
        self.left = limit - json_bytes(bare) - _SLACK_BYTES - _SLACK_PER_LIST * lists
        if self.left < 0:
            raise PreviewRefusedError(
                f"the preview's answer would be over FIREFEED_PREVIEW_MAX_ANSWER_BYTES ({limit:,} bytes) "
                "without a single item: preview fewer rules or fields"
            )
        self.full = True
        #: (what was cut, items shown, items there were), for the note
        self._cuts: list[tuple[str, int, int]] = []

    def take(self, what: str, items: Iterable[Entry], total: int, *, noted: bool = True) -> list[Entry]:
        """The leading `items` that fit in what is left (none once an earlier list was cut). `noted`: the
        `cut` note names this list when it is cut (an export's rows say it themselves, `total`)."""
        kept: list[Entry] = []
        if self.full:
            for item in items:
                size = json_bytes(item) + 1  # and its comma
                if size > self.left:
                    self.full = False
                    break
                self.left -= size
                kept.append(item)
        if len(kept) < total and noted:
            self._cuts.append((what, len(kept), total))
        return kept

    def note(self) -> str | None:
        """What the answer says it left out (None: nothing)."""
        if not self._cuts:
            return None
        shown = "; ".join(f"{what}: {kept} of {total} items" for what, kept, total in self._cuts)
        return (
            f"cut to stay under FIREFEED_PREVIEW_MAX_ANSWER_BYTES ({self.limit:,} bytes): shows {shown}; "
            "preview fewer items, or chosen ones with `item`"
        )
