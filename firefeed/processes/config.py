"""The processes worker's own knobs, read from the environment once at start.

Stand-in until they join the one settings object (firefeed/config.py); the
variable names are final. A bad value stops the worker with the variable's name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from firefeed.errors import ConfigError


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool, minimum: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{name} must be {kind} >= {minimum:g}, got {raw!r}") from None
    if value < minimum or value != value:  # value != value: NaN
        raise ConfigError(f"{name} must be >= {minimum:g}, got {raw!r}")
    return value


@dataclass(frozen=True)
class ProcessConfig:
    """How the processes worker claims, beats and recovers rows."""

    lease_s: float = 30.0
    """A running row whose heartbeat is older than this is taken as orphaned (its worker died)."""
    max_attempts: int = 2
    """Claims a row may lose to dead workers before it fails: 2 = recovered once, then failed."""
    concurrency: int = 4
    """Rows one worker runs at once; a long job keeps one slot, the others keep claiming."""
    poll_s: float = 2.0
    """Fallback poll interval; LISTEN/NOTIFY normally wakes the worker at once."""
    grace_s: float = 30.0
    """On SIGTERM, how long running rows may take to finish before they are handed back."""

    @property
    def heartbeat_s(self) -> float:
        # Three beats per lease: one late or lost beat never costs a live worker its rows.
        return self.lease_s / 3

    @property
    def sweep_s(self) -> float:
        return max(self.lease_s / 2, 0.2)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ProcessConfig:
        env = os.environ if env is None else env
        return cls(
            lease_s=_number(env, "FIREFEED_PROCESS_LEASE_S", cls.lease_s, integer=False, minimum=0.1),
            max_attempts=int(_number(env, "FIREFEED_PROCESS_MAX_ATTEMPTS", cls.max_attempts, integer=True, minimum=1)),
            concurrency=int(_number(env, "FIREFEED_PROCESS_CONCURRENCY", cls.concurrency, integer=True, minimum=1)),
            poll_s=_number(env, "FIREFEED_PROCESS_POLL_S", cls.poll_s, integer=False, minimum=0.01),
            grace_s=_number(env, "FIREFEED_PROCESS_GRACE_S", cls.grace_s, integer=False, minimum=0),
        )
