"""One deliver job: a run's published file handed to one target of its export (SPEC 10 C7).

The file is read from the export storage (a local folder, or spooled from s3://), hashed, and
compared with what the target last received: equal, the delivery is `unchanged` and sends
nothing. Otherwise it is sent (transfer/upload.py for file servers, http_put.py for https), tried
again after a refused or lost connection or a busy server, with the fetch's backoff
(`FIREFEED_FETCH_RETRIES`, `FIREFEED_FETCH_BACKOFF_S`). A delivery that still fails is a job that
*succeeds* with status `failed` and records a `delivery_failed` alert: the run does not fail for it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

from firefeed.alerts.events import record_delivery_failed
from firefeed.deliveries import store
from firefeed.deliveries.http_put import put_https
from firefeed.errors import FireFeedError, JobLostError, RunCancelledError, SourceError
from firefeed.pipeline._retries import Retryable
from firefeed.pipeline.context import RunContext
from firefeed.runs.contract import DeliverParams, DeliveryResult, DeliveryStatus, JobState
from firefeed.runs.jobs import JobStore
from firefeed.spec.delivery import DeliveryTarget
from firefeed.spec.remote import remote_scheme
from firefeed.storage import export_storage

log = logging.getLogger(__name__)

_CHUNK = 1024 * 1024


def deliver_job(ctx: RunContext, job: JobState, jobs: JobStore) -> DeliveryResult:
    """Deliver the job's file to its target; the outcome, `failed` included (never raises for a target)."""
    params = DeliverParams.from_json(job.params_doc())
    export = ctx.spec.exports[params.export]
    target = export.deliver[params.target]
    label = f"{export.name} -> {target.shown}"
    tries = 0
    try:
        with export_storage(ctx.settings).reading(params.key) as local:
            sha256, size = _digest(local)
            if store.last_sha256(ctx.control.engine, ctx.spec.project, export.name, target.shown) == sha256:
                log.info("delivery to %s unchanged: it holds this file (sha256 %s)", target.shown, sha256[:12])
                return DeliveryResult(export.name, target.shown, DeliveryStatus.UNCHANGED, 0, 0, None, sha256)
            retries, backoff = ctx.settings.fetch_retries, ctx.settings.fetch_backoff_s
            while True:
                tries += 1
                try:
                    _send(ctx, target, label, local, tag=str(job.id), attempt=f"{job.attempts}-{tries}")
                    break
                except Retryable as failure:
                    if tries > retries:
                        raise SourceError(
                            label, f"{failure.message} (gave up after {tries} tries)", what="delivery"
                        ) from None
                    delay = backoff * 2 ** (tries - 1)
                    log.warning("delivery to %s: %s; try %d of %d in %.2fs", target.shown, failure.message,
                                tries + 1, retries + 1, delay)  # fmt: skip
                    time.sleep(delay)
        result = DeliveryResult(export.name, target.shown, DeliveryStatus.DELIVERED, size, tries, None, sha256)
        store.record_delivered(ctx.control.engine, ctx.spec.project, ctx.run_id, result)
        log.info("delivered %s to %s: %d bytes in %d tries", export.name, target.shown, size, tries)
        return result
    except (JobLostError, RunCancelledError):
        raise
    except Exception as err:
        message = _message(err)
        # A refusal or a lost server is the target's business; anything else is a bug worth its traceback.
        log.warning("delivery of %s to %s failed: %s", export.name, target.shown, message, exc_info=_unexpected(err))
        record_delivery_failed(
            ctx.run_id, export.name, target.shown, message, settings=ctx.settings, engine=ctx.control.engine
        )
        return DeliveryResult(export.name, target.shown, DeliveryStatus.FAILED, 0, tries, message, None)


def _send(ctx: RunContext, target: DeliveryTarget, label: str, local: Path, *, tag: str, attempt: str) -> None:
    from firefeed.pipeline.steps import fetch_settings
    from firefeed.pipeline.transfer import RemoteAccess
    from firefeed.pipeline.transfer.host_keys import HostKeyStore
    from firefeed.pipeline.transfer.upload import upload_remote
    from firefeed.secrets.store import resolver_for

    settings = fetch_settings(ctx.settings, ctx.spec.company, ctx.spec_dir)
    references = resolver_for(ctx.spec.company, ctx.spec_dir, settings=ctx.settings, engine=ctx.control.engine)
    try:
        if remote_scheme(target.url) is None:
            put_https(
                label=label,
                url=target.url,
                headers=target.headers,
                local=local,
                references=references,
                shown=target.shown,
                settings=settings,
            )
            return
        url = references.expand(target.url.strip(), source=label, where="the URL", in_url=True)
        upload_remote(
            label=label,
            url=url,
            access=RemoteAccess.of(target),
            references=references,
            local=local,
            tag=tag,
            attempt_no=attempt,
            settings=settings,
            host_keys=HostKeyStore(ctx.control.engine, ctx.spec.company),
        )
    except FireFeedError as exc:
        references.scrub(exc)
        raise
    except Retryable as failure:
        failure.message = references.mask(failure.message)
        raise


def _digest(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _unexpected(err: BaseException) -> bool:
    return not isinstance(err, FireFeedError)


def _message(err: BaseException) -> str:
    """What went wrong, without the label a SourceError puts first (the report names export and target)."""
    if isinstance(err, SourceError):
        return err.reason
    if isinstance(err, FireFeedError):
        return err.message
    return f"{type(err).__name__}: the delivery stopped unexpectedly (see the worker's log)"
