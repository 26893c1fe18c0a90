"""The run page shows each export's diff and channel findings, and offers to re-run accepting a blocked drop."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from firefeed.api.app import create_app
from firefeed.api.serve import ServerThread
from firefeed.pipeline.run import execute_run
from firefeed.runs.service import RunStore
from firefeed.runs.tokens import TokenStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import write_csv
from tests.integration.test_web_page import WAIT_MS, browser  # noqa: F401

pytestmark = pytest.mark.integration


def test_the_page_shows_diffs_and_findings_and_re_runs_a_blocked_drop_on_request(
    browser: object,  # noqa: F811
    run_env: Path,
    tmp_path: Path,
) -> None:
    company, project = "web_" + uuid.uuid4().hex[:8], "q_" + uuid.uuid4().hex[:8]
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        # C3: every item's price is an error; this test reads the page's diff, findings and drop guard.
        "exports": [{"name": "google", "format": "google-xml", "path": "g.xml", "max_invalid": "100%"}],
    }
    header = ["id", "title", "description", "link", "image_link", "availability", "price"]
    store = RunStore()
    store.apply_spec(parse_spec(spec), spec_dir=tmp_path)
    reports = []
    for n in (4, 1):
        rows = [
            [
                f"A{i}",
                f"<b>item {i}</b>",
                "d",
                "https://shop.example.com/p",
                "https://shop.example.com/i.jpg",
                "in stock",
                "free",
            ]
            for i in range(n)
        ]
        write_csv(tmp_path / "main.csv", header, rows)
        reports.append(execute_run(store.request_run(project, "cli")))
    assert [r["status"] for r in reports] == ["SUCCEEDED", "FAILED"]
    token = TokenStore().create(company)
    with ServerThread(create_app()) as base_url:
        page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        page.goto(base_url + "/")
        page.fill("#token-input", token)
        page.click("#login-form button[type=submit]")
        page.wait_for_selector(".quality-block .diff", timeout=WAIT_MS)
        assert page.text_content("#run-id") == reports[1]["run_id"]
        diff = page.text_content(".diff[data-export=google]") or ""
        assert "against 4 published: 0 added, 3 removed, 0 changed, 1 unchanged" in diff
        assert "drop 75% > max_drop 50%: blocked" in diff
        cells = page.locator(".findings[data-export=google] tbody tr td").all_text_contents()
        # The title's markup is a finding too (#49 C2 `html`), and is shown as text; the export writes no
        # gtin or mpn (C2 `identifier`).
        assert cells == [
            *("error", "price_format", "price", "1", "A0"),
            *("warning", "identifier", "gtin", "1", "A0"),
            *("warning", "html", "title", "1", "A0"),
        ]
        assert page.locator(".quality-block b").count() == 0  # values are text, never markup
        assert page.locator("#accept-drop").is_visible()
        page.click("#accept-drop")
        page.wait_for_selector(".answer-accepted", timeout=WAIT_MS)
    newest = store.runs_of_project(project)[0]
    assert (newest.status, newest.accept_drop) == ("PENDING", True)
    store.request_cancel(str(newest.id))
