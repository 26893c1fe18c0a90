"""The run timeline page in headless Chromium: Debian's `chromium`, driven by Playwright (no browser download)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from firefeed.api.app import create_app
from firefeed.api.serve import ServerThread
from firefeed.pipeline.run import execute_run
from firefeed.runs.service import RunStore
from firefeed.runs.tokens import TokenStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import write_csv
from tests.integration.web import ARTIFACTS, launched_browser, screenshot_if_failed

pytestmark = pytest.mark.integration

STEPS = ["FETCH", "PARSE", "MERGE", "RULES", "EXPORT"]
# Waits in the browser: the page refreshes every 2 s at most, so 15 s is generous.
WAIT_MS = 15_000


@pytest.fixture()
def browser(request: pytest.FixtureRequest) -> Iterator[object]:
    """One browser per test; a failed test leaves a screenshot of each page it opened in test-artifacts/."""
    for launched in launched_browser():
        try:
            yield launched
        finally:
            screenshot_if_failed(request, launched)


def finished_run(folder: Path) -> tuple[str, str, str]:
    """(company, project, run id) of a project whose one run ran to SUCCEEDED in this process."""
    company, project = "web_" + uuid.uuid4().hex[:8], "shop_" + uuid.uuid4().hex[:8]
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(
        folder / "main.csv",
        ["id", "title", "price", "quantity", "availability"],
        [
            ["A1", "Shoe <b>bold</b>", "10.00 EUR", "0", "in stock"],
            ["A2", "Boot", "20.00 EUR", "4", "in stock"],
            ["A3", "Hat", "5.00 EUR", "0", "in stock"],
        ],
    )
    spec = {
        "company": company,
        "project": project,
        "name": "<script>alert(1)</script> shop",
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": [
            {
                "name": "out of <em>stock</em>",
                "when": {"field": "quantity", "op": "lte", "value": "0"},
                "then": [{"set": "availability", "value": "out of stock"}],
            },
        ],
        "exports": [
            # C3: these items are not Google-complete; the tests read the page of a finished run.
            {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"},
            {"name": "csv", "format": "csv", "path": "out.csv"},
        ],
    }
    store = RunStore()
    store.apply_spec(parse_spec(spec), spec_dir=folder)
    run_id = store.request_run(project, "cli")
    report = execute_run(run_id)
    assert report["status"] == "SUCCEEDED", report["error"]
    return company, project, run_id


def test_the_page_shows_a_finished_runs_timeline_and_run_now_twice_answers_accepted_then_busy(
    browser: object, run_env: Path, tmp_path: Path
) -> None:
    company, project, run_id = finished_run(tmp_path / "feeds")
    token = TokenStore().create(company)
    store = RunStore()
    with ServerThread(create_app()) as base_url:
        page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        console_errors: list[str] = []
        # The browser logs every non-2xx fetch; the 409 of "Run now" is an answer the page shows, not an error.
        page.on(
            "console",
            lambda m: console_errors.append(m.text) if m.type == "error" and "(Conflict)" not in m.text else None,
        )
        page.on("dialog", lambda d: pytest.fail(f"the page opened a dialog: {d.message}"))

        page.goto(base_url + "/")
        page.fill("#token-input", token)
        page.click("#login-form button[type=submit]")

        # The finished run: its five steps on the timeline and in the table, its rule counts and exports.
        page.wait_for_selector("#steps tbody tr >> nth=4", timeout=WAIT_MS)
        assert page.text_content("#company") == f"company {company}"
        assert page.text_content("#run-id") == run_id
        assert page.locator("#steps tbody tr td:first-child").all_text_contents() == STEPS
        assert page.locator(".timeline-row[data-step] .label").all_text_contents() == STEPS
        assert page.locator(".timeline-row[data-step] .bar-fill").count() == 5
        assert page.locator("#run-status").text_content() == "SUCCEEDED"
        assert page.locator("#rules tbody tr td").all_text_contents() == ["out of <em>stock</em>", "2"]
        assert page.locator("#exports tbody tr td:first-child").all_text_contents() == ["google", "csv"]
        assert page.locator("#cancel").is_disabled()
        # Data is text, never markup: the project's name shows its tags literally.
        assert "<script>alert(1)</script> shop" in (page.text_content("#projects") or "")
        assert page.locator("#projects script, #rules em").count() == 0

        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "web-page.png"), full_page=True)

        # "Run now" twice: one accepted run, then a plain busy answer naming it.
        page.click("#run-now")
        page.wait_for_selector(".answer-accepted", timeout=WAIT_MS)
        page.click("#run-now")
        page.wait_for_selector(".answer-busy", timeout=WAIT_MS)
        accepted = page.text_content(".answer-accepted") or ""
        busy = page.text_content(".answer-busy") or ""
        found = re.search(r"accepted — run ([0-9a-f-]{36})", accepted)
        assert found, accepted
        new_run = found.group(1)
        assert f"busy — run {new_run} is active" in busy
        assert [str(r.id) for r in store.runs_of_project(project)] == [new_run, run_id]
        # Not wait_for_function: its polling evaluates a string in the page, which the page's CSP refuses.
        expect(page.locator("#run-id")).to_have_text(new_run, timeout=WAIT_MS)
        assert page.locator("#cancel").is_enabled()

        page.screenshot(path=str(ARTIFACTS / "web-page-busy.png"), full_page=True)

        # Cancel stops the PENDING run, and the page shows it.
        page.click("#cancel")
        page.wait_for_selector("#run-status .status-cancelled", timeout=WAIT_MS)
        assert store.run(new_run).status == "CANCELLED"
        assert console_errors == []


def test_the_run_view_lists_each_lookup_with_its_matched_and_unmatched_counts(
    browser: object, run_env: Path, tmp_path: Path
) -> None:
    company, project = "web_" + uuid.uuid4().hex[:8], "shop_" + uuid.uuid4().hex[:8]
    folder = tmp_path / "feeds"
    folder.mkdir()
    write_csv(folder / "main.csv", ["id", "cat"], [["1", "Rings"], ["2", "Hats"], ["3", "Hats"], ["4", "<b>x</b>"]])
    write_csv(folder / "cats.csv", ["code", "gpc"], [["Rings", "Jewelry > Rings"]])
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "lookups": [{"name": "cats", "url": "cats.csv", "key": "code"}],
        "rules": [{"name": "gpc", "then": [{"lookup": "cats", "match": "cat", "set": {"gpc": "gpc"}}]}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    store = RunStore()
    store.apply_spec(parse_spec(spec), spec_dir=folder)
    report = execute_run(store.request_run(project, "cli"))
    assert report["status"] == "SUCCEEDED", report["error"]
    # A refresh of the same inputs reuses that run (SPEC 11): the page shows the same counts, and says so.
    again = execute_run(store.request_run(project, "cli"))
    assert again["incremental"]["mode"] == "unchanged", again["incremental"]
    token = TokenStore().create(company)
    with ServerThread(create_app()) as base_url:
        page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        page.goto(base_url + "/")
        page.fill("#token-input", token)
        page.click("#login-form button[type=submit]")
        page.wait_for_selector("#lookups tbody tr", timeout=WAIT_MS)
        assert page.text_content("#run-id") == again["run_id"]
        assert (page.text_content(".refresh-mode") or "").startswith("refresh: unchanged")
        reused = page.locator(".timeline-row[data-step] .bar-fill.status-reused")
        assert reused.count() == 3
        assert reused.all_text_contents()[0].startswith(f"reused from run {report['run_id'][:8]}")
        assert page.locator("#lookups tbody tr td").all_text_contents() == [
            "cats",
            "gpc",
            "then[0]",
            "1",
            "3",
            "Hats (2), <b>x</b> (1)",
        ]
        assert page.locator("#lookups b").count() == 0
        # Each header sits where its column's values do: a number right-aligned under a left header read as
        # the next column's (#48). Checked for every table of the run view with a row.
        misaligned = page.evaluate(
            """() => [...document.querySelectorAll("table")].flatMap((t) => {
                const row = t.tBodies[0] && t.tBodies[0].rows[0];
                if (!row || !t.tHead) return [];
                return [...t.tHead.rows[0].cells].flatMap((th, i) => {
                    const td = row.cells[i];
                    const a = getComputedStyle(th).textAlign, b = td ? getComputedStyle(td).textAlign : a;
                    return a === b ? [] : [`${t.id}: ${th.textContent} ${a} over ${b}`];
                });
            })"""
        )
        assert misaligned == []
