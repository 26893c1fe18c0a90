"""The processes worker's knobs, taken from the one settings object (FIREFEED_PROCESS_*)."""

from __future__ import annotations

from dataclasses import dataclass

from firefeed.config import Settings, get_settings


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
    def from_settings(cls, settings: Settings | None = None) -> ProcessConfig:
        settings = settings or get_settings()
        return cls(
            lease_s=settings.process_lease_s,
            max_attempts=settings.process_max_attempts,
            concurrency=settings.process_concurrency,
            poll_s=settings.process_poll_s,
            grace_s=settings.process_grace_s,
        )
