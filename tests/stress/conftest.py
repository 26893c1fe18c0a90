"""The stress and fault suites (`make stress`): shared tally of what was really done.

Every stress test records what it did through the `stress_tally` fixture: runs it
started and checked, faults it injected, hostile inputs it tried and items or
files it lost. The terminal summary prints those real counts, so the closing
figures of `make stress` come from the tests themselves, not from a constant.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest


@dataclass
class StressTally:
    """Counts across the whole `make stress` session."""

    runs: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    inputs: Counter[str] = field(default_factory=Counter)
    lost: int = 0

    def run(self, n: int = 1) -> None:
        """A pipeline run that was started and whose outcome the test checked."""
        self.runs += n

    def fault(self, kind: str, n: int = 1) -> None:
        """A fault the test injected (kill -9, broker restart, killed connection, hostile server...)."""
        self.faults[kind] += n

    def inputs_tried(self, kind: str, n: int = 1) -> None:
        """Hostile or random inputs fed to a parser, the spec loader, the API..."""
        self.inputs[kind] += n

    def lose(self, n: int) -> None:
        """Items, exports or jobs a test found missing or half-written (the suite then fails too)."""
        self.lost += n


_TALLY = StressTally()


@pytest.fixture(scope="session")
def stress_tally() -> StressTally:
    return _TALLY


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/stress is a stress test, marked or not.
    for item in items:
        if "tests/stress/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.stress)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    t = _TALLY
    if not (t.runs or t.faults or t.inputs or t.lost):
        return
    w = terminalreporter
    w.section("stress summary")
    w.write_line(f"runs: {t.runs}")
    w.write_line(f"faults injected: {sum(t.faults.values())} ({_breakdown(t.faults)})")
    w.write_line(f"inputs tried: {sum(t.inputs.values())} ({_breakdown(t.inputs)})")
    w.write_line(f"lost: {t.lost}")


def _breakdown(counts: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
