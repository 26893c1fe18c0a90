"""Who sends the recorded alerts, and one attempt at one alert.

With a broker (FIREFEED_BROKER_URL), each new alert is a `firefeed.alerts.send` task on the `control`
queue, sent after the row is committed; a failed attempt sends the task again with the backoff as its
countdown, and beat's `firefeed.alerts.sweep` re-sends what is due (a lost message, a worker that died).

Without one (`firefeed run`, the API on the embedded default) there is no worker to ask: a thread of
this process sends them after the run ended, for at most FIREFEED_ALERT_BATCH_WAIT_S. It is not a
daemon, so `firefeed run` prints its report at once and then waits for it at exit, that long at most.
What it leaves pending, the next run's thread (any due alert of the project) or beat sends.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.engine import Engine

from firefeed import metrics
from firefeed.alerts import outbox
from firefeed.alerts.outbox import AlertStatus, Outcome
from firefeed.alerts.send import post
from firefeed.alerts.shown import target_host, without_url
from firefeed.config import Settings
from firefeed.errors import ConfigError

log = logging.getLogger(__name__)

SEND_TASK = "firefeed.alerts.send"
SWEEP_TASK = "firefeed.alerts.sweep"
#: How long past its timeout an attempt keeps the alert from other senders (then it is due again)
_LEASE_MARGIN_S = 30.0


class Attempted(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"  # failed; due again after `wait_s`
    FAILED = "failed"  # refused for good, or out of retry time
    NOT_DUE = "not_due"  # another sender holds it, or its backoff has not passed: due in `wait_s`
    DONE = "done"  # delivered or failed before this call (or unknown)


@dataclass(frozen=True)
class AttemptResult:
    state: Attempted
    wait_s: float = 0.0


def backoff(settings: Settings, attempt: int) -> float:
    """Seconds before attempt `attempt + 1`: FIREFEED_ALERT_BACKOFF_S doubled per attempt, at most _MAX_S."""
    return float(min(settings.alert_backoff_s * 2 ** max(attempt - 1, 0), settings.alert_backoff_max_s))


def attempt(alert_id: int, *, settings: Settings, engine: Engine) -> AttemptResult:
    """One attempt at one alert, its outcome kept on the row; the state it leaves the alert in."""
    claimed = outbox.claim(engine, alert_id, settings.alert_timeout_s + _LEASE_MARGIN_S)
    if claimed is None:
        found = outbox.state(engine, alert_id)
        if found is None or found[0] is not AlertStatus.PENDING:
            return AttemptResult(Attempted.DONE)
        return AttemptResult(Attempted.NOT_DUE, found[1])
    try:
        from firefeed.secrets.store import SecretStore

        key = SecretStore(engine, settings).resolve(claimed.company, claimed.secret)
        missing = None if key else f"company {claimed.company!r} has no secret {claimed.secret!r} to sign with"
    except ConfigError as err:
        key, missing = None, f"secret {claimed.secret!r}: {err.message}"
    if key is None:
        result_outcome, delivered, retry = Outcome(None, missing, 0), False, True
    else:
        headers = {
            "X-FireFeed-Event": claimed.event,
            "X-FireFeed-Delivery": str(claimed.id),
            "X-FireFeed-Attempt": str(claimed.attempt),
        }
        sent = post(claimed.url, claimed.body, key=key, headers=headers, settings=settings)
        result_outcome, delivered, retry = sent.outcome, sent.delivered, sent.retry
    if delivered:
        outbox.delivered(engine, alert_id, result_outcome)
        metrics.alert_attempted(claimed.event, "sent")
        log.info("alert %s (%s) delivered to %s", alert_id, claimed.event, target_host(claimed.url))
        return AttemptResult(Attempted.DELIVERED)
    if not retry:
        outbox.failed(engine, alert_id, result_outcome)
        metrics.alert_attempted(claimed.event, "given_up")
        log.warning(
            "alert %s (%s) to %s failed: %s",
            alert_id,
            claimed.event,
            target_host(claimed.url),
            without_url(str(result_outcome.error), claimed.url),
        )
        return AttemptResult(Attempted.FAILED)
    delay = backoff(settings, claimed.attempt)
    status = outbox.retry(engine, alert_id, result_outcome, delay_s=delay, retry_for_s=settings.alert_retry_for_s)
    if status is AlertStatus.FAILED:
        metrics.alert_attempted(claimed.event, "given_up")
        log.warning(
            "alert %s (%s) to %s gave up after %d attempts: %s",
            alert_id,
            claimed.event,
            target_host(claimed.url),
            claimed.attempt,
            without_url(str(result_outcome.error), claimed.url),
        )
        return AttemptResult(Attempted.FAILED)
    metrics.alert_attempted(claimed.event, "failed")
    log.info(
        "alert %s to %s: %s; again in %g s",
        alert_id,
        target_host(claimed.url),
        without_url(str(result_outcome.error), claimed.url),
        delay,
    )
    return AttemptResult(Attempted.RETRY, delay)


def kick(alert_ids: list[int], project: str, *, settings: Settings, engine: Engine) -> None:
    """Have the committed alerts sent: tasks when a broker is configured, else this process's thread."""
    if not alert_ids:
        return
    if settings.broker_url:
        try:
            from firefeed.celery_app import app
            from firefeed.tasks.queues import Queue

            for alert_id in alert_ids:
                app.send_task(SEND_TASK, args=[alert_id], queue=Queue.CONTROL.value, ignore_result=True)
            return
        except Exception:  # the rows are recorded: beat's sweep sends them
            log.warning("could not hand alerts %s to the broker; the sweep sends them", alert_ids, exc_info=True)
            return
    start_batch(alert_ids, project, settings=settings, engine=engine)


# -- without a broker: one bounded thread per run end ------------------------------------
_threads: list[threading.Thread] = []
_threads_lock = threading.Lock()


def start_batch(alert_ids: list[int], project: str, *, settings: Settings, engine: Engine) -> threading.Thread:
    """Send the alerts (and the project's other due ones) from a thread of this process, for a bounded time."""
    thread = threading.Thread(
        target=_send_for_a_while,
        args=(list(alert_ids), project, settings, engine, time.monotonic() + settings.alert_batch_wait_s),
        name="firefeed-alerts",
        daemon=False,  # `firefeed run` waits for it at exit, at most FIREFEED_ALERT_BATCH_WAIT_S
    )
    with _threads_lock:
        _threads[:] = [t for t in _threads if t.is_alive()]
        _threads.append(thread)
    thread.start()
    return thread


def wait_batches(timeout: float) -> bool:
    """Wait for this process's alert threads; True when none is left running (tests, a clean exit)."""
    end = time.monotonic() + timeout
    with _threads_lock:
        threads = list(_threads)
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def _send_for_a_while(alert_ids: list[int], project: str, settings: Settings, engine: Engine, deadline: float) -> None:
    try:
        pending = dict.fromkeys(alert_ids + outbox.due(engine, project=project, limit=100))
        first = True  # one attempt each even with FIREFEED_ALERT_BATCH_WAIT_S=0
        while pending and (first or time.monotonic() < deadline):
            first = False
            waits: list[float] = []
            for alert_id in list(pending):
                result = attempt(alert_id, settings=settings, engine=engine)
                if result.state in (Attempted.DELIVERED, Attempted.FAILED, Attempted.DONE):
                    pending.pop(alert_id)
                else:
                    waits.append(result.wait_s)
            if pending and time.monotonic() < deadline:
                time.sleep(max(0.05, min(min(waits), deadline - time.monotonic())))
        if pending:
            log.info("alerts %s still pending: beat's sweep or the next run sends them", list(pending))
    except Exception:
        log.warning("the alert sender stopped; the pending alerts stay recorded", exc_info=True)
