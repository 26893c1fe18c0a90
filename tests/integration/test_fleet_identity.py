"""Two fleets on one broker (#48): workers are named per fleet, and a root task of the other fleet says so."""

from __future__ import annotations

import uuid

import pytest

from firefeed.commands.worker import worker_argv
from firefeed.config import reset_settings
from firefeed.errors import NotFoundError
from firefeed.tasks.pipeline import known_run
from firefeed.tasks.queues import fleet_tag, queue_of_worker

pytestmark = pytest.mark.integration


def test_worker_names_carry_a_tag_of_the_fleets_database(monkeypatch: pytest.MonkeyPatch) -> None:
    names = []
    for db in ("postgresql://h/one", "postgresql://h/two"):
        monkeypatch.setenv("FIREFEED_DATABASE_URL", db)
        reset_settings()
        argv = worker_argv("pipeline", 1)
        names.append(argv[argv.index("--hostname") + 1])
    reset_settings()
    assert names == [
        f"pipeline.{fleet_tag('postgresql://h/one', '')}@%h",
        f"pipeline.{fleet_tag('postgresql://h/two', '')}@%h",
    ]
    assert names[0] != names[1]
    assert [queue_of_worker(n.replace("%h", "host")) for n in names] == ["pipeline", "pipeline"]
    assert fleet_tag(None, "/a") != fleet_tag(None, "/b")  # two embedded databases are two fleets


def test_a_root_task_of_a_run_this_database_lacks_names_the_other_fleet(database_url: str) -> None:
    with pytest.raises(NotFoundError, match="another fleet, with another database, may be using this broker"):
        known_run(str(uuid.uuid4()))
