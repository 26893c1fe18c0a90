"""The browser tests' shared parts: Debian's headless Chromium driven by Playwright (no browser download),
one browser per test module, and a screenshot in test-artifacts/ of every page a failed test left open."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("headless Chromium is missing: install it with `apt-get install -y chromium` (.ci/run does)")


def launched_browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start.
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


def screenshot_if_failed(request: pytest.FixtureRequest, browser: Any) -> list[Path]:
    """A failed test's open pages, saved as test-artifacts/failed-<test>-<n>.png (what the test saw)."""
    report = getattr(request.node, "rep_call", None)
    if report is None or not report.failed:
        return []
    ARTIFACTS.mkdir(exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:120]
    saved: list[Path] = []
    for context in browser.contexts:
        for page in context.pages:
            path = ARTIFACTS / f"failed-{name}-{len(saved)}.png"
            try:
                page.screenshot(path=str(path), full_page=True)
                saved.append(path)
            except Exception:  # a crashed page has nothing to show; the test's own error says why
                continue
    return saved
