"""The one module that reads the concurrency variables (SPEC section 1), and sizes the worker pools.

PIPELINE_CONCURRENCY is the runs one pipeline worker drives at once; IMPORT,
RULES, EXPORT and SYNC_CONCURRENCY are a step's jobs per such run, so a step worker's
pool holds PIPELINE x that many (`Concurrency.pool_size`): the pool slots are
then exactly what the connection budget `connections_needed` counts.

Change `.env`, restart the worker: no rebuild. A bad value stops the process
with a message naming the variable, because a silently clamped pool is worse
than a worker that refuses to start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from firefeed.errors import ConfigError

DEFAULTS: dict[str, int] = {
    # One run per pipeline worker: more lets N projects run at once, not one run faster.
    "PIPELINE_CONCURRENCY": 1,
    # Per run driven at once (a step worker's pool is PIPELINE x these, see `pool_size`).
    # FETCH/PARSE/MERGE jobs are I/O and COPY bound; two overlap downloads with parsing.
    "IMPORT_CONCURRENCY": 2,
    "RULES_CONCURRENCY": 2,
    "EXPORT_CONCURRENCY": 2,
    # SPEC 10 C9-C10: sync jobs (one per export with `sync`) per run. One: a channel's quota is per
    # account and one sync per account runs at a time anyway; its requests go out on threads within it.
    "SYNC_CONCURRENCY": 1,
}
#: The control worker's pool (not a variable): the trigger, beat's tick and maintenance are short
#: statements; two slots let a trigger be answered while a maintenance task runs.
CONTROL_POOL = 2


@dataclass(frozen=True)
class Concurrency:
    pipeline: int
    import_: int
    rules: int
    export: int
    sync: int = 1  # a sync slot holds one connection: its ledger statements and its account's lock

    def for_queue(self, queue: str) -> int:
        return {
            "pipeline": self.pipeline,
            "import": self.import_,
            "rules": self.rules,
            "export": self.export,
            "sync": self.sync,
        }[queue]

    def pool_size(self, queue: str) -> int:
        """The pool of one worker of `queue`: PIPELINE runs for `pipeline`, PIPELINE x its step's value for a step.

        The control worker's pool is CONTROL_POOL whatever the variables say.

        IMPORT/RULES/EXPORT_CONCURRENCY are the step's jobs *per run the pipeline
        worker drives*. A step pool of the bare value would make the runs share it:
        with PIPELINE_CONCURRENCY=4 and IMPORT_CONCURRENCY=2, four runs would queue
        for two download slots, and raising PIPELINE would not let more projects run
        at once (measured by `make bench-concurrency`). Sized this way, a set of
        workers holds exactly the pool slots the connection budget counts.
        """
        if queue == "pipeline":
            return self.pipeline
        if queue == "control":
            return CONTROL_POOL
        return self.pipeline * self.for_queue(queue)

    def connections_needed(self, web_pool: int) -> int:
        """Postgres connections the fleet may hold: PIPELINE x (IMPORT + RULES + EXPORT + SYNC) + web pool."""
        return self.pipeline * (self.import_ + self.rules + self.export + self.sync) + web_pool


def _dotenv(path: Path = Path(".env")) -> dict[str, str]:
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        values[name.strip()] = value.strip().strip("'\"")
    return values


def _parse(name: str, raw: str | None) -> int:
    if raw is None or raw.strip() == "":
        return DEFAULTS[name]
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a whole number >= 1, got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"{name} must be a whole number >= 1, got {raw!r}")
    return value


def load_concurrency(environ: dict[str, str] | None = None) -> Concurrency:
    """Read the variables (environment first, then `.env`, then the defaults)."""
    env = dict(os.environ) if environ is None else environ
    fallback = _dotenv() if environ is None else {}
    values = {name: _parse(name, env.get(name, fallback.get(name))) for name in DEFAULTS}
    return Concurrency(
        pipeline=values["PIPELINE_CONCURRENCY"],
        import_=values["IMPORT_CONCURRENCY"],
        rules=values["RULES_CONCURRENCY"],
        export=values["EXPORT_CONCURRENCY"],
        sync=values["SYNC_CONCURRENCY"],
    )
