"""What a rule preview answers: per rule its counts, per sample item what each rule did to it.

Pydantic models, so the CLI's `--json` and the API answer the same JSON and /docs shows its shape.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class FieldChange(BaseModel):
    """One field a rule changed on one item; a field the rule created has `before` "".

    A list field's values are its elements (SPEC 9), `[]` when it has none.
    """

    field: str
    before: str | list[str]
    after: str | list[str]


class ItemRuleEffect(BaseModel):
    """What one enabled rule did to one item that reached it."""

    rule: str
    matched: bool = Field(description="the rule's `when` held for the item (always true without `when`)")
    excluded: bool = Field(description="the rule excluded the item: later rules and exports never see it")
    changes: list[FieldChange]


#: a cell's value: a text, or a list field's elements (SPEC 9)
Cell = str | list[str]


class PreviewItem(BaseModel):
    """One sample item, in feed order, and the rules it went through."""

    key: str
    source: str = Field(description="the source that brought the item: the primary, or an append source")
    excluded_by: str | None = Field(description="the rule that excluded the item, if one did")
    rules: list[ItemRuleEffect] = Field(description="every enabled rule the item reached, in order")
    values: list[Cell] = Field(
        default_factory=list,
        description="the item after the rules, aligned with the answer's `fields` (an export's item: its `fields`);"
        " an excluded item's values as the excluding rule found them",
    )
    origin: list[str] = Field(
        default_factory=list,
        description="aligned with `values`: what last set each cell, `source:<name>` or `rule:<rule name>`",
    )
    changed: list[int] = Field(default_factory=list, description="indexes of the cells a rule changed")


class RuleSummary(BaseModel):
    """One rule over the whole sample; a disabled rule is listed with zero counts."""

    rule: str
    index: int = Field(description="1-based position in the spec's rule list")
    enabled: bool
    items_in: int = Field(description="sample items that reached the rule (not excluded before it)")
    matched: int
    not_matched: int
    changed: int = Field(description="items with at least one field changed by the rule")
    excluded: int


class SourceSample(BaseModel):
    """How much of one source the preview read, and how many of its rows are in the sample."""

    name: str
    bytes: int
    rows_read: int = Field(description="rows parsed before the sample was complete (the whole file when needed)")
    rows_kept: int = Field(description="rows whose key is in the sample")
    malformed: int


class Sample(BaseModel):
    """How the sample was chosen: the first `items` items of the primary, or the items with these `ids`."""

    items: int | None
    ids: list[str] | None
    missing_ids: list[str] = Field(description="requested ids no source has")


class ExportPreview(BaseModel):
    """An export's own rules (SPEC 9, channel rules) over its copy of the sample after the project's rules."""

    name: str
    fields: list[str] = Field(default_factory=list, description="what its items' `values` are aligned with")
    rules: list[RuleSummary]
    items: list[PreviewItem] = Field(description="the sample items the project's rules kept, and the export's rules")


class OutputRow(BaseModel):
    """One row the export would write for a sample item: its cells aligned with the output's `columns`."""

    key: str
    cells: list[Cell]


class OutputExcluded(BaseModel):
    """A sample item the export would not write, and why: the rule that excluded it (a project rule or the
    export's own), or `where` (the export's filter)."""

    key: str
    by: str


class ExportOutput(BaseModel):
    """What one export would write for the sample: its columns (its `fields` mapping, literals and
    templates), after its `where` and its own rules, in feed order."""

    export: str
    columns: list[str]
    rows: list[OutputRow] = Field(
        description="in feed order; the first ones only when the answer's bound was reached (see `total`)"
    )
    total: int = Field(description="rows the export would write for the sample (more than `rows` when cut)")
    excluded: list[OutputExcluded]


class Preview(BaseModel):
    """The effect of a spec's rules on a sample of its items, computed without touching the project."""

    company: str
    project: str
    sample: Sample
    fields: list[str] = Field(description="the merged items' fields, then the fields rules create")
    sources: list[SourceSample]
    rules: list[RuleSummary]
    items: list[PreviewItem]
    exports: list[ExportPreview] = Field(
        default_factory=list, description="per export with channel rules, what its own rules do (SPEC 9)"
    )
    outputs: list[ExportOutput] = Field(
        default_factory=list, description="per export (every one, in spec order), the rows it would write (#53)"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="fields the rules or an export's fields and where read that no source has and no rule"
        " sets (a run's report gives the same warnings)",
    )
    duration_s: float
    cut: str | None = Field(
        default=None,
        description="set when the answer left items out to stay under FIREFEED_PREVIEW_MAX_ANSWER_BYTES: how many"
        " of each list it shows (the first ones, in feed order)",
    )
