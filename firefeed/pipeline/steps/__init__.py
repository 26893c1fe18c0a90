"""The steps' work as plain functions, which the jobs (firefeed/pipeline/jobs.py) call.

Nothing here knows about Celery or job rows. Each function takes the run's
context, does one step's work (or one source's, or one export's) and returns
what the next step and the RunReport need. One module per step, as the driver's
step list reads: fetch, parse, merge, rules (around firefeed/pipeline/rule_passes.py,
which runs the passes) and export; finish is the run's end, _shared what several
of them need. The names are re-exported here: callers write `steps.fetch_one`.
"""

from firefeed.dataplane.passes import CHANNEL_PASS_STRIDE
from firefeed.pipeline.steps._shared import PARSER_VERSION, export_key, parse_signature
from firefeed.pipeline.steps.export import export_one, prefill_spares
from firefeed.pipeline.steps.fetch import FetchOutcome, fetch_feed, fetch_one, fetch_settings
from firefeed.pipeline.steps.finish import cleanup, discard_partials, drop_unnamed_tables
from firefeed.pipeline.steps.merge import merge
from firefeed.pipeline.steps.parse import STAGING, ParseOutcome, parse_one, stage_feed
from firefeed.pipeline.steps.rules import channel_report, channel_rules, read_once

__all__ = [
    "CHANNEL_PASS_STRIDE",
    "PARSER_VERSION",
    "STAGING",
    "FetchOutcome",
    "ParseOutcome",
    "channel_report",
    "channel_rules",
    "cleanup",
    "discard_partials",
    "drop_unnamed_tables",
    "export_key",
    "export_one",
    "fetch_feed",
    "fetch_one",
    "fetch_settings",
    "merge",
    "parse_one",
    "parse_signature",
    "prefill_spares",
    "read_once",
    "stage_feed",
]
