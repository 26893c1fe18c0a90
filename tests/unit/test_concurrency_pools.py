"""The worker pools firefeed/concurrency.py sizes: PIPELINE runs, and PIPELINE x a step's value for each step."""

from __future__ import annotations

from firefeed.concurrency import load_concurrency

ENV = {"PIPELINE_CONCURRENCY": "4", "IMPORT_CONCURRENCY": "2", "RULES_CONCURRENCY": "3", "EXPORT_CONCURRENCY": "1"}


def test_a_step_pool_holds_its_value_for_every_run_the_pipeline_worker_drives() -> None:
    c = load_concurrency(ENV)
    assert {q: c.pool_size(q) for q in ("pipeline", "import", "rules", "export")} == {
        "pipeline": 4,
        "import": 8,
        "rules": 12,
        "export": 4,
    }


def test_the_defaults_keep_the_pools_of_one_run() -> None:
    c = load_concurrency({})
    assert {q: c.pool_size(q) for q in ("pipeline", "import", "rules", "export", "sync")} == {
        "pipeline": 1,
        "import": 2,
        "rules": 2,
        "export": 2,
        "sync": 1,
    }


def test_the_step_pools_are_the_slots_the_connection_budget_counts() -> None:
    c = load_concurrency(ENV)
    assert sum(c.pool_size(q) for q in ("import", "rules", "export", "sync")) == c.connections_needed(web_pool=0)
