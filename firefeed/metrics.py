"""Every Prometheus metric of FireFeed, in one module: `firefeed_` prefix, base units in names, `_total` on counters.

Two kinds of metrics, exposed two ways:

* Process metrics (counters and histograms) are counted where things happen,
  through the small functions below (`run_started`, `process_claimed`, ...), so
  callers never hold a metric object. In a prefork Celery worker every pool
  child counts into prometheus_client's multiprocess files and the worker's
  main process serves their sum on its own port (`start_worker_exposition`):
  one port per worker, never one per child, so no child's counts are missed.
* Fleet gauges (active runs, rules_tmp tables alive, queue depth) are read at
  scrape time from the database and the broker by `FleetCollector`. Only
  `render()` (the API's `/metrics`) includes them, so they are not multiplied
  by the number of worker processes scraped.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import values as _values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from firefeed.procutil import pid_alive

log = logging.getLogger(__name__)

TRIGGERS = ("cli", "api", "beat", "task", "process")
STEPS = ("FETCH", "PARSE", "MERGE", "RULES", "EXPORT")
SCHEDULE_OUTCOMES = ("started", "busy", "duplicate", "error", "invalid")
#: What an alert's attempt led to: the receiver took it (sent), another attempt follows (failed), or the
#: alert ends undelivered (given_up: refused for good, or its retry time ran out). SPEC 10 C8.
ALERT_OUTCOMES = ("sent", "failed", "given_up")
ACTIVE_STATUSES = ("PENDING", "RUNNING")
# A run lasts from seconds to hours; a step from milliseconds to an hour.
RUN_BUCKETS_S = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
STEP_BUCKETS_S = (0.05, 0.25, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# The API's /metrics is open: one scrape per this many seconds reaches the database and the broker.
FLEET_CACHE_S = 5.0
FLEET_TIMEOUT_S = 2.0
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class _ProcessMetrics:
    """The process metrics, built once per process (and again when a worker switches to multiprocess files)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.runs_started = Counter(
            "firefeed_runs_started", "Runs a driver started (PENDING to RUNNING), by trigger.", ["trigger"], registry=r
        )
        self.runs_finished = Counter(
            "firefeed_runs_finished", "Runs that ended, by final status and trigger.", ["status", "trigger"], registry=r
        )
        self.runs_by_mode = Counter(
            "firefeed_runs_by_refresh_mode",
            "Runs past PARSE, by how they compute their items (SPEC 11 I2): full, delta or unchanged.",
            ["mode"],
            registry=r,
        )
        self.run_duration = Histogram(
            "firefeed_run_duration_seconds",
            "Wall time of a run from start to end, by final status.",
            ["status"],
            buckets=RUN_BUCKETS_S,
            registry=r,
        )
        self.step_duration = Histogram(
            "firefeed_step_duration_seconds",
            "Wall time of one pipeline step of a run, by step and status.",
            ["step", "status"],
            buckets=STEP_BUCKETS_S,
            registry=r,
        )
        self.step_rows = Counter(
            "firefeed_step_rows",
            "Rows a step read (direction=in) and wrote (direction=out).",
            ["step", "direction"],
            registry=r,
        )
        self.lock_refusals = Counter(
            "firefeed_lock_refusals",
            "Run requests refused because the project already had a run (HTTP 409, exit 3), by trigger.",
            ["trigger"],
            registry=r,
        )
        self.scheduled = Counter(
            "firefeed_scheduled_runs",
            "Schedule slots handled by the beat tick, by outcome (started, busy, duplicate, error, invalid).",
            ["outcome"],
            registry=r,
        )
        self.processes_claimed = Counter(
            "firefeed_processes_claimed", "Rows of the processes table claimed, by function.", ["function"], registry=r
        )
        self.processes_finished = Counter(
            "firefeed_processes_finished", "Rows of the processes table finished, by status.", ["status"], registry=r
        )
        self.rules_tmp_dropped = Counter(
            "firefeed_janitor_dropped_tables", "Orphan rules_tmp tables dropped by the janitor.", registry=r
        )
        self.runs_reaped = Counter(
            "firefeed_reaped_runs", "RUNNING runs without a heartbeat marked FAILED by the reaper.", registry=r
        )
        self.runs_pruned = Counter("firefeed_pruned_runs", "Finished runs deleted past the retention.", registry=r)
        # Feed quality (#9): channel findings of the exports a run wrote, and publishes the checks stopped.
        self.export_findings = Counter(
            "firefeed_export_findings",
            "Channel findings of written exports (one per check and attribute), by channel, severity and check.",
            ["channel", "severity", "check"],
            registry=r,
        )
        self.export_finding_items = Counter(
            "firefeed_export_finding_items",
            "Items counted by the channel findings of written exports, by channel, severity and check.",
            ["channel", "severity", "check"],
            registry=r,
        )
        self.publish_blocked = Counter(
            "firefeed_publish_blocked_runs",
            "Runs whose exports were not published because a check failed, by reason (drop_guard, channel_errors).",
            ["reason"],
            registry=r,
        )
        # Feed URLs (SPEC 10 C5): labelled by known exports only (an unknown id counts under empty labels).
        self.feed_fetches = Counter(
            "firefeed_feed_fetches",
            "Requests to feed URLs, by company, project, export and status class (2xx, 3xx, 4xx, 5xx).",
            ["company", "project", "export", "status_class"],
            registry=r,
        )
        # Alerts (SPEC 10 C8): by event only, never a company or project (unbounded, and tenants' names).
        self.alert_attempts = Counter(
            "firefeed_alert_attempts",
            "Attempts at sending an alert, by event and outcome (sent; failed, to be tried again; given_up).",
            ["event", "outcome"],
            registry=r,
        )
        # Series that exist from the start read 0 rather than missing, so rate() and alerts work at once.
        for trigger in TRIGGERS:
            self.runs_started.labels(trigger)
            self.lock_refusals.labels(trigger)
        for outcome in SCHEDULE_OUTCOMES:
            self.scheduled.labels(outcome)
        for step in STEPS:
            self.step_rows.labels(step, "in")
            self.step_rows.labels(step, "out")
        for reason in ("drop_guard", "channel_errors"):
            self.publish_blocked.labels(reason)
        from firefeed.alerts.spec import AlertEvent

        for event in AlertEvent:
            for outcome in ALERT_OUTCOMES:
                self.alert_attempts.labels(event.value, outcome)
        self._all = [v for v in vars(self).values() if isinstance(v, Counter | Histogram)]

    def unregister(self, registry: CollectorRegistry) -> None:
        for metric in self._all:
            with contextlib.suppress(KeyError):
                registry.unregister(metric)


_process = _ProcessMetrics(REGISTRY)


# -- what the rest of FireFeed calls ---------------------------------------------------
def run_started(trigger: str) -> None:
    _process.runs_started.labels(trigger).inc()


def run_finished(trigger: str, status: str, started_at: datetime | None, finished_at: datetime | None) -> None:
    """Count a run's end once; its duration when it had started."""
    _process.runs_finished.labels(status, trigger).inc()
    if started_at is not None and finished_at is not None:
        _process.run_duration.labels(status).observe(max((finished_at - started_at).total_seconds(), 0.0))


def step_finished(
    step: str, status: str, started_at: datetime | None, finished_at: datetime | None, rows_in: int, rows_out: int
) -> None:
    if started_at is not None and finished_at is not None:
        _process.step_duration.labels(step, status).observe(max((finished_at - started_at).total_seconds(), 0.0))
    _process.step_rows.labels(step, "in").inc(max(rows_in, 0))
    _process.step_rows.labels(step, "out").inc(max(rows_out, 0))


def lock_refused(trigger: str) -> None:
    _process.lock_refusals.labels(trigger).inc()


def schedule_outcome(outcome: str) -> None:
    _process.scheduled.labels(outcome).inc()


def process_claimed(function: str) -> None:
    """Called by the processes worker each time it claims a row."""
    _process.processes_claimed.labels(function).inc()


def process_finished(status: str) -> None:
    """Called by the processes worker when it writes a row's outcome (completed or failed)."""
    _process.processes_finished.labels(status).inc()


def rules_tmp_dropped(count: int) -> None:
    _process.rules_tmp_dropped.inc(count)


def run_mode(mode: str) -> None:
    """A run decided how it computes its items (full, delta, unchanged: pipeline/incremental.py)."""
    _process.runs_by_mode.labels(mode).inc()


def runs_reaped(count: int) -> None:
    _process.runs_reaped.inc(count)


def export_finding(channel: str, severity: str, check: str, items: int) -> None:
    """One channel finding of a written export, and the items it counts."""
    _process.export_findings.labels(channel, severity, check).inc()
    _process.export_finding_items.labels(channel, severity, check).inc(items)


def publish_blocked(reason: str) -> None:
    _process.publish_blocked.labels(reason).inc()


def feed_fetched(company: str, project: str, export: str, status: int) -> None:
    _process.feed_fetches.labels(company, project, export, f"{status // 100}xx").inc()


def alert_attempted(event: str, outcome: str) -> None:
    """One attempt at an alert ended: `outcome` is one of ALERT_OUTCOMES."""
    _process.alert_attempts.labels(event, outcome).inc()


def runs_pruned(count: int) -> None:
    _process.runs_pruned.inc(count)


# -- fleet gauges, read at scrape time ---------------------------------------------------
def redis_queue_depths(broker_url: str, queues: Sequence[str]) -> dict[str, int]:
    """Messages waiting per queue on a Redis broker: LLEN of each queue's list and its priority lists.

    Kombu keeps priority 0 in the list named like the queue and the other
    priority steps in `<queue>\\x06\\x16<priority>`.
    """
    import redis
    from kombu.transport.redis import PRIORITY_STEPS, Channel

    client = redis.Redis.from_url(broker_url, socket_timeout=FLEET_TIMEOUT_S, socket_connect_timeout=FLEET_TIMEOUT_S)
    try:
        pipe = client.pipeline(transaction=False)
        keys = {q: [q] + [f"{q}{Channel.sep}{p}" for p in PRIORITY_STEPS if p] for q in queues}
        for q in queues:
            for key in keys[q]:
                pipe.llen(key)
        counts = iter(pipe.execute())
        return {q: sum(int(next(counts)) for _ in keys[q]) for q in queues}
    finally:
        client.close()


class FleetCollector(Collector):
    """Gauges that are cheaper to read from the control plane and the broker than to count in every process."""

    def __init__(self, engine: Any = None, broker_url: str | None = None, cache_s: float = FLEET_CACHE_S) -> None:
        self._engine, self._broker_url, self._cache_s = engine, broker_url, cache_s
        self._cached: tuple[float, list[Metric]] | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] > self._cache_s:
                self._cached = (time.monotonic(), self._read())
            return list(self._cached[1])

    def _read(self) -> list[Metric]:
        up = GaugeMetricFamily(
            "firefeed_collector_up",
            "1 when the last scrape could read the source (database, broker).",
            labels=["source"],
        )
        families: list[Metric] = [up]
        try:
            active, tmp_tables = self._from_database()
        except Exception as err:
            log.warning("metrics: could not read the database: %s", err)
            up.add_metric(["database"], 0)
        else:
            up.add_metric(["database"], 1)
            runs = GaugeMetricFamily(
                "firefeed_runs_active", "Runs PENDING or RUNNING now, by status.", labels=["status"]
            )
            for status in ACTIVE_STATUSES:
                runs.add_metric([status], active.get(status, 0))
            tmp = GaugeMetricFamily(
                "firefeed_rules_tmp_tables", "rules_tmp_* tables alive now (live runs' and orphans not yet dropped)."
            )
            tmp.add_metric([], tmp_tables)
            families += [runs, tmp]
        broker = self._broker()
        if broker and broker.startswith(("redis://", "rediss://")):
            from firefeed.tasks.queues import ALL_QUEUES

            try:
                depths = redis_queue_depths(broker, ALL_QUEUES)
            except Exception as err:
                log.warning("metrics: could not read the broker: %s", err)
                up.add_metric(["broker"], 0)
            else:
                up.add_metric(["broker"], 1)
                depth = GaugeMetricFamily(
                    "firefeed_queue_messages", "Messages waiting in each Celery queue (queue depth).", labels=["queue"]
                )
                for queue, n in depths.items():
                    depth.add_metric([queue], n)
                families.append(depth)
        return families

    def _broker(self) -> str | None:
        if self._broker_url is not None:
            return self._broker_url
        from firefeed.config import get_settings

        return get_settings().broker_url

    def _from_database(self) -> tuple[dict[str, int], int]:
        from sqlalchemy import func, select, text

        from firefeed.dataplane.run_tables import RunTables
        from firefeed.db.engine import get_engine
        from firefeed.db.models import PipelineRun
        from firefeed.schema.service import SchemaService

        engine = self._engine or get_engine()
        with engine.connect() as conn, conn.begin():
            # A scrape must not hang on a locked or overloaded database.
            conn.execute(text("SET LOCAL statement_timeout = :ms"), {"ms": int(FLEET_TIMEOUT_S * 1000)})
            rows = conn.execute(
                select(PipelineRun.status, func.count())
                .where(PipelineRun.status.in_(ACTIVE_STATUSES))
                .group_by(PipelineRun.status)
            ).all()
            # The catalog query is the SchemaService's, in this transaction (so under the timeout above).
            tmp = RunTables(SchemaService(engine)).count_rules_tmp(conn=conn.connection.driver_connection)
        return {str(status): int(n) for status, n in rows}, tmp


_fleet: FleetCollector | None = None
_fleet_lock = threading.Lock()


def fleet_collector() -> FleetCollector:
    """The process's one FleetCollector (created on first use)."""
    global _fleet
    with _fleet_lock:
        if _fleet is None:
            _fleet = FleetCollector()
        return _fleet


def render(*, fleet: bool = True) -> tuple[bytes, str]:
    """The exposition for the API's `/metrics`: (body, content type).

    The process metrics (of every process sharing PROMETHEUS_MULTIPROC_DIR when
    it is set) plus, with `fleet`, the gauges read from the database and broker.
    """
    registry = CollectorRegistry(auto_describe=False)
    path = os.environ.get(MULTIPROC_ENV)
    if path and os.path.isdir(path):
        registry.register(_CompactingCollector(path))
    else:
        registry.register(_RegistryView(REGISTRY))
    if fleet:
        registry.register(fleet_collector())
    return generate_latest(registry), CONTENT_TYPE_LATEST


class _RegistryView(Collector):
    """Another registry's metrics inside this one (the default registry plus the fleet gauges)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self._source = source

    def collect(self) -> Iterable[Metric]:
        return list(self._source.collect())


# -- prefork workers: multiprocess files, summed on one port per worker -----------------------------
_compact_lock = threading.Lock()
_COMPACTED = ("counter", "histogram", "summary")


def _file_pid(path: str) -> int | None:
    stem = os.path.basename(path)[: -len(".db")]
    tail = stem.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else None


def compact(path: str | Path) -> int:
    """Fold the files of pool children that have exited into one archive file per type; returns files removed.

    Each child writes its own `counter_<pid>.db` and `histogram_<pid>.db`, so a
    pool recycled by `max_tasks_per_child` leaves two files per child behind and
    every scrape reads them all. Their totals are added into `<type>_archive.db`
    (counters must never go down) and the files removed; gauges of dead
    children are simply removed (a dead process has no current value).
    """
    path = str(path)
    removed = 0
    with _compact_lock:
        files = glob.glob(os.path.join(path, "*.db"))
        dead = [f for f in files if (pid := _file_pid(f)) is not None and not pid_alive(pid)]
        for typ in _COMPACTED:
            mine = [f for f in dead if os.path.basename(f).startswith(typ + "_")]
            if not mine:
                continue
            archive = os.path.join(path, f"{typ}_archive.db")
            sources = ([archive] if os.path.exists(archive) else []) + mine
            merged = MultiProcessCollector.merge(sources, accumulate=False)
            tmp = archive + ".tmp"
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
            out = MmapedDict(tmp)
            try:
                for metric in merged:
                    for s in metric.samples:
                        key = mmap_key(
                            metric.name, s.name, list(s.labels), list(s.labels.values()), metric.documentation
                        )
                        out.write_value(key, s.value, 0.0)
            finally:
                out.close()
            # The archive is read only under this lock (scrapes take it too), so the swap is never half seen.
            os.replace(tmp, archive)
            for f in mine:
                os.remove(f)
                removed += 1
        for f in dead:
            if os.path.basename(f).startswith("gauge_") and os.path.exists(f):
                os.remove(f)
                removed += 1
    return removed


class _CompactingCollector(Collector):
    """MultiProcessCollector that first folds exited children's files, under the same lock as compaction."""

    def __init__(self, path: str) -> None:
        self._path = path

    def collect(self) -> Iterable[Metric]:
        compact(self._path)
        with _compact_lock:
            return list(MultiProcessCollector.merge(glob.glob(os.path.join(self._path, "*.db")), accumulate=True))


def enable_multiprocess(path: str | Path) -> None:
    """Switch this process (and the children it forks) to multiprocess files in `path`.

    prometheus_client picks its value class when a metric is built, so the
    metrics are built again after the switch; callers only use the functions
    above, which always reach the current ones.
    """
    global _process
    os.environ[MULTIPROC_ENV] = str(path)
    _values.ValueClass = _values.get_value_class()
    _process.unregister(REGISTRY)
    _process = _ProcessMetrics(REGISTRY)


def mark_process_dead(pid: int) -> None:
    """A pool child exited: drop its live gauges now; its counters are folded into the archive at the next scrape."""
    path = os.environ.get(MULTIPROC_ENV)
    if path and os.path.isdir(path):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, path)


QUEUE_PORT_OFFSET = {"pipeline": 0, "import": 1, "rules": 2, "export": 3, "control": 4, "sync": 5}


def worker_port(base: int, queues: Sequence[str]) -> int:
    """The metrics port of a worker: the base for `pipeline`, +1 `import`, +2 `rules`, +3 `export`, +4 `control`,
    +5 `sync`.

    One worker per queue per machine (what `firefeed worker` starts) gets
    distinct ports without configuration; a worker of several queues uses the
    base port. Celery's default queue, which the control worker also takes, does not count.
    """
    from firefeed.tasks.queues import CELERY_DEFAULT_QUEUE

    own = [q for q in queues if q != CELERY_DEFAULT_QUEUE]
    offset = QUEUE_PORT_OFFSET.get(own[0], 0) if len(own) == 1 else 0
    return base + offset


def start_worker_exposition(queues: Sequence[str], *, address: str, base_port: int, metrics_dir: Path) -> int | None:
    """In a worker's main process, before the pool forks: serve every child's metrics on one port.

    The port is bound first; only its owner then wipes `<metrics_dir>/<port>`
    (files of a previous worker would otherwise be summed forever) and switches
    to multiprocess files. Returns the port, or None when metrics are off
    (port 0) or the port is taken (logged, and the worker runs on without them).
    """
    if base_port == 0:
        return None
    from prometheus_client import start_http_server

    port = worker_port(base_port, queues)
    directory = metrics_dir / f"worker-{port}"
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_CompactingCollector(str(directory)))
    try:
        start_http_server(port, addr=address, registry=registry)
    except OSError as err:
        log.warning(
            "worker metrics off: port %s:%d is taken (%s); set FIREFEED_WORKER_METRICS_PORT to a free base port",
            address,
            port,
            err,
        )
        return None
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    enable_multiprocess(directory)
    log.info("worker metrics on http://%s:%d/metrics (files in %s)", address, port, directory)
    return port


def iter_samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in an exposition text (tests and `firefeed doctor`)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield s.name, dict(s.labels), float(s.value)
