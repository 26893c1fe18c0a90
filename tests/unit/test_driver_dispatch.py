"""The Celery dispatcher is made per run from the queues its worker consumes; that alone decides RULES' fan-out."""

from __future__ import annotations

from celery import Celery

from firefeed.runs.contract import JobKind
from firefeed.tasks.dispatch import CeleryDispatcher, worker_queues
from firefeed.tasks.queues import ALL_QUEUES
from firefeed.tasks.routing import TASK_FOR_KIND


def _worker_app(*queues: str) -> Celery:
    """An app whose queues a worker selected, as `celery worker -Q ...` does before its pool starts."""
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.task_queues = None
    for q in ALL_QUEUES:
        app.amqp.queues.select_add(q)
    app.amqp.queues.select(list(queues))
    return app


def test_a_worker_of_the_pipeline_queue_alone_fans_rules_out() -> None:
    consumed = worker_queues(_worker_app("pipeline"))
    assert consumed == {"pipeline"}
    assert CeleryDispatcher(consumed).fans_out_rules is True


def test_a_worker_that_consumes_the_rules_queue_too_runs_rules_in_place() -> None:
    consumed = worker_queues(_worker_app(*ALL_QUEUES))
    assert consumed == set(ALL_QUEUES)
    assert CeleryDispatcher(consumed).fans_out_rules is False
    assert CeleryDispatcher(["pipeline", "rules"]).fans_out_rules is False


def test_every_job_kind_has_a_task_and_a_queue() -> None:
    assert set(TASK_FOR_KIND) == set(JobKind)
    assert all(name.startswith("firefeed.") and queue.value in ALL_QUEUES for name, queue in TASK_FOR_KIND.values())
    hint = CeleryDispatcher(["pipeline"]).hint(JobKind.RULES_CHUNK)
    assert "'rules'" in hint and "firefeed.rules.chunk" in hint
