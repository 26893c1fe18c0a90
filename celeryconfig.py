"""Celery configuration: maps FireFeed's one settings object to Celery's lowercase keys.

Task names are a wire contract (`firefeed.<area>.<verb>`); routes send each to
its queue, so a worker on another machine only needs the queue names.
"""

from __future__ import annotations

from firefeed.config import get_settings
from firefeed.tasks.queues import Queue
from firefeed.tasks.schedules import beat_schedule as _beat_entries  # beat (#5)

_settings = get_settings()

broker_url = _settings.celery_broker_url
# kombu's transport for the URL's scheme (None), except on Redis. Always assigned: a reload of this module for
# another broker (tests do) would otherwise keep the Redis transport, and send memory:// to localhost:6379.
broker_transport: str | None = None
if broker_url.startswith(("redis://", "rediss://")):
    # kombu's Redis transport, but a connection lost mid-ack reconnects instead of stopping the worker.
    from firefeed.tasks.broker import TRANSPORT

    broker_transport = TRANSPORT
result_backend = _settings.celery_result_backend
task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
timezone = "UTC"
enable_utc = True

# Flower and the metrics see every task.
worker_send_task_events = True
task_send_sent_event = True
task_track_started = True

# Long jobs: take one message at a time so a busy worker does not hoard queued jobs.
worker_prefetch_multiplier = 1
task_acks_late = False
task_time_limit = _settings.step_time_limit_s + 60
task_soft_time_limit = _settings.step_time_limit_s
result_expires = 24 * 3600
broker_connection_retry_on_startup = True
# Per broker kind: Redis's visibility timeout (longer than any job), create_engine's options for SQL.
broker_transport_options = _settings.celery_broker_transport_options
result_backend_transport_options = {"retry_policy": {"timeout": 5.0}}

# A task with no route goes where a plain client's would: the control worker, never behind a run.
task_default_queue = Queue.CONTROL.value
task_routes = {
    # The trigger answers busy at once (SPEC 1): it must not wait for the pipeline slot a run holds.
    "firefeed.pipeline.trigger": {"queue": Queue.CONTROL.value},
    "firefeed.pipeline.*": {"queue": Queue.PIPELINE.value},
    "firefeed.import.*": {"queue": Queue.IMPORT.value},
    "firefeed.rules.*": {"queue": Queue.RULES.value},
    "firefeed.export.*": {"queue": Queue.EXPORT.value},
    "firefeed.sync.*": {"queue": Queue.SYNC.value},  # SPEC 10 C9-C10: paced by a channel, never in an export slot
    "firefeed.maintenance.*": {"queue": Queue.CONTROL.value},
    "firefeed.schedules.*": {"queue": Queue.CONTROL.value},  # beat (#5)
    "firefeed.alerts.*": {"queue": Queue.CONTROL.value},  # alerts (SPEC 10 C8): never behind a run
}
imports = ("firefeed.tasks.pipeline", "firefeed.tasks.steps", "firefeed.tasks.maintenance")
# Operations (#5): the schedule tick and maintenance entries, and the worker hooks (metrics, log fields).
imports += ("firefeed.tasks.schedules", "firefeed.tasks.signals")
imports += ("firefeed.tasks.alerts",)
beat_schedule = _beat_entries(_settings)
