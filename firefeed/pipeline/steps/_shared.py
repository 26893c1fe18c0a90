"""What more than one step of a run needs: the parse signature a fetch and a parse compare, and an
export's storage key (the export writes to it, the run's end discards its partial)."""

from __future__ import annotations

import hashlib
import json

from firefeed.errors import UnsafePathError
from firefeed.pipeline.context import RunContext
from firefeed.spec.model import SourceSpec
from firefeed.storage import export_storage

#: Bump when parsing changes in a way that makes old staging tables stale.
PARSER_VERSION = "1"


def parse_signature(src: SourceSpec) -> str:
    """What the staged rows of a source depend on besides the bytes of the file."""
    # Credentials and the pinned key (SPEC 10 C6) change how a file is fetched, not how it is parsed.
    doc = src.model_dump(
        mode="json",
        exclude={"headers", "mode", "fields", "name", "key_from", "password", "private_key", "host_key"},
    )
    if doc.get("lists") is None:
        doc.pop("lists", None)  # a source without lists keeps the signature it always had
    else:
        # Lists staged otherwise by an earlier version (all as text, or all as text[]) are parsed again.
        doc["_lists_staged"] = "text[]; csv one-character separator: delimited text"
    doc["_parser"] = PARSER_VERSION
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def export_key(ctx: RunContext, index: int) -> str:
    """The storage key an export publishes to; UnsafePathError when its path leaves the project's folder."""
    from firefeed.export.paths import export_key as checked_key

    exp = ctx.spec.exports[index]
    try:
        return checked_key(export_storage(ctx.settings), ctx.spec.company, ctx.spec.project, exp.path, gzip=exp.gzip)
    except UnsafePathError as err:
        raise err.for_export(exp.name) from err
