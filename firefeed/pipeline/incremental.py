"""Refreshes (SPEC 11, #52): whether a run recomputes its items, and the `incremental` part of its report.

After FETCH and PARSE the driver asks `decide`. A run is `unchanged` when nothing its last succeeded
run read has changed: every source came back not modified (and stands as that run left it), every
lookup table's file has that run's digest, the spec is that run's version, the engine is the same,
no failed run since rebuilt the project's tables, and that run's files are still in place with the
bytes it recorded. MERGE, RULES and EXPORT are then not recomputed: their counts and details are
that run's, the diff is what a full run of unchanged inputs gives (every item unchanged), the
guard's verdicts are taken again for this run, nothing new is published, and the kept tables
(items, lookups, rules result, published keys) stay the valid ones. Any doubt makes the run `full`
with a `reason`. `delta` (part 2 of #52, pipeline/delta.py): only `enrich` sources changed, or only
records of the primary, edited in place and patched by PARSE, and every rule reads one item at a time,
so only the items they changed are merged and ruled again.

The rule language has no clock (no now(), today or date arithmetic, SPEC 3 and 8) and no export
format writes a time, so no spec is time-dependent: the same inputs always give the same bytes. A
rule or format that reads the clock must make `time_dependent` name it.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from firefeed.dataplane import state
from firefeed.dataplane.state import KeptRun, RunState
from firefeed.db.models import PipelineRun
from firefeed.export.patch import Beside
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.lookups import DIGEST_KEY, inline_digest
from firefeed.runs import contract
from firefeed.runs.contract import Step
from firefeed.schema.identifiers import published_keys_table
from firefeed.spec.model import ProjectSpec
from firefeed.storage import export_storage

log = logging.getLogger(__name__)

Mode = Literal["full", "delta", "unchanged"]
MODES: tuple[Mode, ...] = ("full", "delta", "unchanged")

#: The steps an unchanged run takes from the run it reuses.
REUSED_STEPS = (Step.MERGE, Step.RULES, Step.EXPORT)


def computed_by(previous: KeptRun) -> str:
    """The run that computed `previous`'s rules result: itself, or the run it reused (an unchanged run)."""
    return str(previous.details.get(Step.RULES, {}).get("reused_from") or previous.run_id)


@dataclass(frozen=True)
class Decision:
    """How a run computes its items, and why."""

    mode: Mode
    reason: str
    previous: KeptRun | None = None
    #: a delta run's changed sources (pipeline/delta.py)
    changed: tuple[str, ...] = ()

    @classmethod
    def full(cls, reason: str, previous: KeptRun | None = None) -> Decision:
        return cls("full", reason, previous)

    @property
    def computed_by(self) -> str | None:
        """The run that computed the last succeeded run's rules result (the one an unchanged run reused)."""
        return None if self.previous is None else computed_by(self.previous)

    @property
    def reused_from(self) -> str | None:
        """The run whose MERGE, RULES and EXPORT an unchanged run shows (the one that computed them)."""
        if self.mode != "unchanged" or self.previous is None:
            return None
        return computed_by(self.previous)

    def report(self, *, recomputed: int) -> dict[str, Any]:
        """The RunReport's `incremental` part (SPEC 11 I2). A full run does not work out what changed
        (part 1 of #52): its added, changed and removed are null, every item is recomputed. A delta run
        changes items only (an enrich source adds and removes none): `recomputed` of them."""
        unchanged, delta = self.mode == "unchanged", self.mode == "delta"
        known = unchanged or delta
        doc: dict[str, Any] = {
            "mode": self.mode,
            "reason": self.reason,
            "items_added": 0 if known else None,
            "items_changed": recomputed if delta else 0 if unchanged else None,
            "items_removed": 0 if known else None,
            "items_recomputed": 0 if unchanged else recomputed,
        }
        if unchanged:
            doc["reused_from"] = self.reused_from
        return doc


def time_dependent(spec: ProjectSpec) -> str | None:
    """What in the spec reads the clock (such a spec never reuses a run); None: nothing does.

    Nothing can today: the rule language and the export formats have no time (SPEC 3, 8, 10).
    """
    del spec
    return None


#: the name of `PublishedCheck`'s thread
CHECK_THREAD = "published-check"


class PublishedCheck:
    """`state.moved_files` of the last succeeded run's exports, begun on a thread of its own before FETCH.

    A refresh reads a file FireFeed has just published once (its stamps are too fresh to vouch for it,
    dataplane/file_identity.py): the 690 MB export of a 1M-item delta, ~1 s on the next refresh's serial
    path between PARSE and the decision. Its answer depends on nothing PARSE does, so it is read beside
    FETCH and PARSE; `close` stops a read the decision did not wait for (a full run never needs it)."""

    def __init__(self, ctx: RunContext, previous: KeptRun) -> None:
        #: the last succeeded run, read once for the check and the decision (the project's lock: no other
        #: run of it can succeed meanwhile)
        self.previous = previous
        self._stop = threading.Event()
        exports, store, project = previous.exports, ctx.store, ctx.spec.project
        storage = export_storage(ctx.settings)
        self._job = Beside(
            lambda: state.moved_files(storage, exports, store=store, project=project, stop=self._stop),
            name=CHECK_THREAD,
        )

    @classmethod
    def begin(cls, ctx: RunContext, run: PipelineRun) -> PublishedCheck | None:
        """The check begun, where `_full_reason` may come to ask it: no `--full`, a last succeeded run with the
        same spec version and exports. `run`: this run's row."""
        if run.full:
            return None
        previous = state.last_succeeded(ctx.store, ctx.spec.project, before=ctx.run_id)
        if previous is None or run.spec_version_id is None or run.spec_version_id != previous.run.spec_version_id:
            return None
        if sorted(e.get("name", "") for e in previous.exports) != sorted(e.name for e in ctx.spec.exports):
            return None
        return cls(ctx, previous)

    def moved(self) -> list[str]:
        return list(self._job.result())

    def close(self) -> None:
        self._stop.set()


def decide(
    ctx: RunContext,
    parsed: Sequence[contract.SourceResult],
    *,
    full: bool,
    accept_invalid: bool,
    published: PublishedCheck | None = None,
) -> Decision:
    """After PARSE: `unchanged` when the last succeeded run's work is still this run's (see the module);
    `delta` when only enrich sources changed and pipeline/delta.py can recompute just their items."""
    if full:
        return Decision.full("--full asked")
    spec = ctx.spec
    previous = (
        published.previous
        if published is not None
        else state.last_succeeded(ctx.store, spec.project, before=ctx.run_id)
    )
    if previous is None:
        return Decision.full("first run (no succeeded run to reuse)")
    reason = _full_reason(ctx, parsed, previous, accept_invalid=accept_invalid, published=published)
    if reason is not None:
        return _delta_or_full(ctx, parsed, previous, reason, accept_invalid=accept_invalid, published=published)
    return Decision("unchanged", f"no source, lookup table or the spec changed since run {previous.run_id}", previous)


def _delta_or_full(
    ctx: RunContext,
    parsed: Sequence[contract.SourceResult],
    previous: KeptRun,
    reason: str,
    *,
    accept_invalid: bool,
    published: PublishedCheck | None = None,
) -> Decision:
    """A delta when the sources that changed are all that changed and pipeline/delta.py can take them;
    else full with `reason` (and why not a delta, when only enrich sources changed)."""
    from firefeed.dataplane.names import kept_result_table
    from firefeed.pipeline import delta

    index = {s.name: i for i, s in enumerate(ctx.spec.sources)}
    changed = tuple(r.parsed.name for r in parsed if not r.parse.get("not_modified"))
    primary = ctx.spec.sources[0].name
    if changed == (primary,):
        # The primary alone: a delta when PARSE patched it (only its changed records, keys kept).
        why = delta.primary_reason(ctx, parsed, previous)
        if why is not None:
            return Decision.full(f"{reason}; not a delta: {why}", previous)
    elif not changed or any(index.get(n, 0) == 0 or ctx.spec.sources[index[n]].mode != "enrich" for n in changed):
        return Decision.full(reason, previous)
    ignore = frozenset(changed)
    if _full_reason(ctx, parsed, previous, accept_invalid=accept_invalid, ignore=ignore, published=published):
        return Decision.full(reason, previous)
    fields = list(previous.details.get(Step.MERGE, {}).get("fields") or [])
    why = delta.why_not(ctx, parsed, changed, fields, kept_result_table(computed_by(previous)))
    if why is not None:
        return Decision.full(f"{reason}; not a delta: {why}", previous)
    if changed == (primary,):
        return Decision(
            "delta",
            f"only records of the primary source {primary!r} changed since run {previous.run_id}",
            previous,
            changed,
        )
    names = ", ".join(repr(n) for n in changed)
    return Decision(
        "delta", f"only the enrich source(s) {names} changed since run {previous.run_id}", previous, changed
    )


def _full_reason(
    ctx: RunContext,
    parsed: Sequence[contract.SourceResult],
    previous: KeptRun,
    *,
    accept_invalid: bool,
    ignore: frozenset[str] = frozenset(),
    published: PublishedCheck | None = None,
) -> str | None:
    """The first thing that makes the last succeeded run's work not this run's; None: nothing does.
    `ignore`: sources whose change a delta takes (their own checks are skipped)."""
    spec = ctx.spec
    kept = previous.state
    if kept is None:
        return "the last succeeded run kept no state to compare (it ran before refreshes)"
    if kept.engine != state.ENGINE_VERSION:
        return "FireFeed changed how it computes items since the last succeeded run"
    run = ctx.store.run(ctx.run_id)
    if run.spec_version_id is None or run.spec_version_id != previous.run.spec_version_id:
        return "spec changed"
    clock = time_dependent(spec)
    if clock is not None:
        return f"time-dependent rules ({clock})"
    for result in parsed:
        name = result.parsed.name
        if name not in ignore and not result.parse.get("not_modified"):
            return f"source {name!r} changed"
    now = state.source_states(ctx.store, spec.project, [s.name for s in spec.sources])
    for src in spec.sources:
        if src.name in ignore:
            continue
        before, current = kept.sources.get(src.name), now.get(src.name)
        if before is None or current is None or current.sha256 is None or before != current:
            return f"source {src.name!r} changed since the last succeeded run"
    if previous.rebuilt_since:
        return f"run {previous.rebuilt_since[0]} rebuilt the project's tables since the last succeeded run"
    changed = _changed_lookup(ctx, kept)
    if changed is not None:
        return f"lookup {changed!r} changed"
    exports = previous.exports
    if sorted(e.get("name", "") for e in exports) != sorted(e.name for e in spec.exports):
        return "the last succeeded run published other exports"
    if published is not None:
        moved = published.moved()
    else:
        moved = state.moved_files(export_storage(ctx.settings), exports, store=ctx.store, project=spec.project)
    if moved:
        return f"export {moved[0]!r}: its published file is gone or changed"
    for entry in exports:
        if entry.get("diff") is not None and not ctx.schema.table_exists(
            spec.company, published_keys_table(spec.project, entry["name"])
        ):
            return f"export {entry['name']!r}: its published keys are gone (its diff needs them)"
        verdict = ((entry.get("diagnostics") or {}).get("max_invalid") or {}).get("status")
        if verdict == "accepted" and not accept_invalid:
            return f"export {entry['name']!r} was published with --accept-invalid; this run must check it again"
    return None


def _changed_lookup(ctx: RunContext, kept: RunState) -> str | None:
    """The first lookup table whose file (or rows) differs from the digest the last succeeded run kept."""
    from firefeed.errors import SourceError, UnsafePathError
    from firefeed.pipeline.fetch import Validators
    from firefeed.pipeline.steps import fetch_feed

    for lk in ctx.spec.lookups:
        recorded = kept.lookups.get(lk.name)
        if recorded is None:
            return lk.name
        if lk.inline:
            if inline_digest(lk) != recorded:
                return lk.name
            continue
        try:
            # The file read and hashed (a local one in place), kept only if it differs: MERGE reads it again.
            fetched = fetch_feed(ctx, lk, previous=Validators(sha256=recorded), scope="lookup-check:")
        except (SourceError, UnsafePathError) as err:
            log.info("lookup %r could not be compared (%s); the run recomputes", lk.name, err)
            return lk.name
        if not fetched.not_modified:
            return lk.name
    return None


# -- a full run's part: what MERGE keeps for the next run to compare ------------------------------------


def merge_detail(ctx: RunContext, decision: Decision, detail: dict[str, Any], rows: int) -> None:
    """Add the run's state and `incremental` part to its MERGE detail; each lookup's digest moves out of
    its report entry into the state."""
    digests: dict[str, str] = {}
    for entry in detail.get("lookups", []):
        digest = entry.pop(DIGEST_KEY, None)
        if digest is not None:
            digests[str(entry["name"])] = str(digest)
    sources = state.source_states(ctx.store, ctx.spec.project, [s.name for s in ctx.spec.sources])
    detail["state"] = RunState(sources=sources, lookups=digests).to_json()
    detail["incremental"] = decision.report(recomputed=rows)


def delta_merge_detail(decision: Decision, ctx: RunContext, detail: dict[str, Any], changed: int) -> None:
    """A delta run's MERGE state (its lookups' digests are the last run's: they did not change) and
    `incremental` part: `changed` items recomputed."""
    previous = decision.previous
    assert previous is not None and previous.state is not None
    sources = state.source_states(ctx.store, ctx.spec.project, [s.name for s in ctx.spec.sources])
    detail["state"] = RunState(sources=sources, lookups=dict(previous.state.lookups)).to_json()
    detail["incremental"] = decision.report(recomputed=changed)


# -- an unchanged run's parts: the reused run's, as a full run of unchanged inputs would give them ------------


def reused_step(decision: Decision, step: Step) -> tuple[int, int, dict[str, Any]]:
    """(rows_in, rows_out, detail) of MERGE or RULES in an unchanged run: the reused run's."""
    previous = decision.previous
    assert previous is not None
    rows_in, rows_out = previous.rows.get(step, (0, 0))
    detail = copy.deepcopy(previous.details.get(step, {}))
    detail["reused_from"] = decision.reused_from
    if step == Step.MERGE:
        detail["incremental"] = decision.report(recomputed=0)
    return rows_in, rows_out, detail


def unchanged_exports(decision: Decision) -> list[dict[str, Any]]:
    """The reused run's export entries, each diff what a full run of the same items gives: every row
    unchanged against the rows that run published. The guard annotates them again (`check_publish`)."""
    previous = decision.previous
    assert previous is not None
    entries = []
    for entry in copy.deepcopy(previous.exports):
        changes = entry.get("diff")
        if changes is not None:
            rows = int(changes.get("rows") or 0)
            changes.pop("drop", None)
            changes.update(
                baseline=True,
                previous=rows,
                rows=rows,
                added=0,
                removed=0,
                changed=0,
                unchanged=rows,
                samples={"added": [], "removed": [], "changed": []},
            )
        diagnostics = entry.get("diagnostics")
        if isinstance(diagnostics, dict):
            diagnostics.pop("max_invalid", None)
        entries.append(entry)
    return entries


def export_rows(decision: Decision) -> tuple[int, int]:
    previous = decision.previous
    assert previous is not None
    return previous.rows.get(Step.EXPORT, (0, 0))


def result_fields(decision: Decision) -> list[str]:
    """The fields after the project's rules in the reused run (what a sync maps the columns of)."""
    previous = decision.previous
    assert previous is not None
    rules = previous.details.get(Step.RULES, {})
    merged = previous.details.get(Step.MERGE, {})
    return list(rules.get("fields") or merged.get("fields") or [])
