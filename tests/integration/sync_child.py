"""A sync in a process of its own, for the kill tests: `python -m tests.integration.sync_child PROJECT EXPORT`.

It runs what a sync job runs (firefeed.sync.jobs.run_sync) for the export as the project's last
published run has it, with the environment it was started with, and prints the outcome as JSON.
"""

from __future__ import annotations

import json
import sys

from firefeed.config import get_settings
from firefeed.db.engine import get_engine
from firefeed.sync.jobs import run_sync
from firefeed.sync.service import synced_exports


def main(project: str, export: str) -> None:
    engine = get_engine()
    (item,) = synced_exports(engine, project, export)
    result, _ = run_sync(
        item.spec, item.spec_dir, item.export, item.columns, settings=get_settings(), engine=engine, list_status=False
    )
    print(json.dumps(result.to_json()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
