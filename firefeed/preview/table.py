"""A preview as readable text: the rules' counts, then each sample item and what the rules did to it."""

from __future__ import annotations

from firefeed.preview.models import Preview

#: values longer than this are cut in the table (the JSON has them whole)
_SHOWN = 60


def _shown(value: str | list[str]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    text = value if len(value) <= _SHOWN else value[: _SHOWN - 1] + "…"
    return '""' if not text else repr(text)


def format_preview(preview: Preview) -> str:
    sample = preview.sample
    if sample.ids is not None:
        chosen = f"{len(sample.ids)} requested id(s)"
    else:
        chosen = f"the first {sample.items} of source {preview.sources[0].name!r}"
    lines = [
        f"preview {preview.company}/{preview.project}: {len(preview.items)} item(s), {chosen}"
        f"  {preview.duration_s:.2f}s",
    ]
    if sample.missing_ids:
        lines.append("  not found in any source: " + ", ".join(sample.missing_ids))
    lines += [f"  warning: {w}" for w in preview.warnings]
    if preview.cut is not None:
        lines.append(f"  {preview.cut}")
    lines += ["", f"  {'source':<20}{'bytes':>14}{'rows read':>11}{'kept':>7}{'malformed':>10}"]
    for s in preview.sources:
        lines.append(f"  {s.name[:19]:<20}{s.bytes:>14,}{s.rows_read:>11,}{s.rows_kept:>7,}{s.malformed:>10,}")
    if preview.rules:
        lines += ["", f"  {'rule':<30}{'in':>6}{'matched':>9}{'not':>6}{'changed':>9}{'excluded':>10}"]
        for r in preview.rules:
            if not r.enabled:
                lines.append(f"  {r.rule[:29]:<30}  (disabled)")
                continue
            lines.append(
                f"  {r.rule[:29]:<30}{r.items_in:>6}{r.matched:>9}{r.not_matched:>6}{r.changed:>9}{r.excluded:>10}"
            )
    else:
        lines += ["", "  the spec has no rules"]
    for item in preview.items:
        origin = "" if item.source == preview.sources[0].name else f"  (from {item.source})"
        lines += ["", f"  item {item.key}{origin}"]
        touched = False
        for effect in item.rules:
            for c in effect.changes:
                lines.append(f"    {effect.rule}: {c.field} {_shown(c.before)} -> {_shown(c.after)}")
                touched = True
        if item.excluded_by is not None:
            lines.append(f"    excluded by {item.excluded_by!r}")
        elif not touched:
            lines.append("    unchanged")
    for export in preview.exports:
        lines += ["", f"  export {export.name!r}: its own rules, after the project's"]
        for r in export.rules:
            if not r.enabled:
                lines.append(f"    {r.rule[:28]:<29}  (disabled)")
                continue
            lines.append(
                f"    {r.rule[:28]:<29}{r.items_in:>6}{r.matched:>9}{r.not_matched:>6}{r.changed:>9}{r.excluded:>10}"
            )
        for item in export.items:
            for effect in item.rules:
                for c in effect.changes:
                    lines.append(
                        f"    item {item.key}: {effect.rule}: {c.field} {_shown(c.before)} -> {_shown(c.after)}"
                    )
            if item.excluded_by is not None:
                lines.append(f"    item {item.key}: excluded by {item.excluded_by!r}")
    return "\n".join(lines)
