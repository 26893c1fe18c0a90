"""The page as the merchant's workspace (#53), in headless Chromium against the real API and Postgres.

One browser and one API server for the module; each test opens its own page (its own tab storage) with
its company's token. A failed test leaves a screenshot of its pages in test-artifacts/.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from firefeed.config import reset_settings
from firefeed.pipeline.run import execute_run
from firefeed.runs.service import RunStore
from firefeed.runs.tokens import TokenStore
from firefeed.secrets.crypto import generate_key
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import write_csv
from tests.integration.web import ARTIFACTS, launched_browser, screenshot_if_failed

pytestmark = pytest.mark.integration

WAIT_MS = 15_000
HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched_browser()


@pytest.fixture(scope="module")
def root(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """FIREFEED_LOCAL_SOURCES_ROOT (a company's files in root/<company>/), exports and data in a temp folder."""
    base = tmp_path_factory.mktemp("workspace")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIREFEED_LOCAL_SOURCES_ROOT", str(base / "root"))
        mp.setenv("FIREFEED_EXPORT_DIR", str(base / "exports"))
        mp.setenv("FIREFEED_DATA_DIR", str(base / "var"))
        mp.setenv("FIREFEED_SECRETS_KEY", generate_key())
        reset_settings()
        yield base / "root"
    reset_settings()


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    from firefeed.api.app import create_app
    from firefeed.api.serve import ServerThread

    with ServerThread(create_app()) as url:
        yield url


@pytest.fixture()
def open_page(browser: Any, server: str, request: pytest.FixtureRequest) -> Iterator[Callable[[str], Any]]:
    """open_page(token): a logged-in page at 1366x768; a dialog (an injected alert) fails the test."""
    pages: list[Any] = []
    dialogs: list[str] = []

    def open_(token: str) -> Any:
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.set_default_timeout(WAIT_MS)

        def on_dialog(dialog: Any) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.goto(server + "/")
        page.fill("#token-input", token)
        page.click("#login-form button[type=submit]")
        page.wait_for_selector("#projects-pane")
        pages.append(page)
        return page

    yield open_
    screenshot_if_failed(request, browser)
    for page in pages:
        page.context.close()
    assert dialogs == [], f"the page opened a dialog: {dialogs}"


def company_with_shop(
    root: Path, *, name: str = "shop", rule: str = "out of stock", hostile: bool = False
) -> tuple[str, str, str]:
    """(company, project, token) of a project with one SUCCEEDED run: four items, two rules, two exports."""
    company, project = "ws_" + uuid.uuid4().hex[:8], "shop_" + uuid.uuid4().hex[:8]
    folder = root / company
    folder.mkdir(parents=True)
    bad = HOSTILE if hostile else ""
    write_csv(
        folder / "main.csv",
        ["id", "title", "price", "quantity", "availability", "cat"],
        [
            ["A1", "Shoe" + bad, "10.00 EUR", "0", "in stock", "Rings"],
            ["A2", "Boot", "20.00 EUR", "4", "in stock", "Hats" + bad],
            ["A3", "Hat", "5.00 EUR", "0", "in stock", "Hats" + bad],
            ["T9", "test item", "1.00 EUR", "1", "in stock", "Socks"],
        ],
    )
    spec: dict[str, Any] = {
        "company": company,
        "project": project,
        "name": name + bad,
        "sources": [{"name": "main" + bad, "url": "main.csv"}],
        "rules": [
            {
                "name": rule + bad,
                "when": {"field": "quantity", "op": "lte", "value": "0"},
                "then": [{"set": "availability", "value": "out of stock" + bad}],
            },
            {
                "name": "drop tests" + bad,
                "when": {"field": "title", "op": "starts_with", "value": "test"},
                "then": [{"exclude": True}],
            },
        ],
        "exports": [
            {"name": "csv" + bad, "format": "csv", "path": "out.csv"},
            {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"},
        ],
    }
    if hostile:  # a lookup too, whose name and unmatched values the values view shows
        spec["lookups"] = [{"name": "cats" + bad, "key": "code", "rows": [{"code": "Rings", "gpc": "R" + bad}]}]
        spec["rules"].append(
            {"name": "gpc" + bad, "then": [{"lookup": "cats" + bad, "match": "cat", "set": {"gpc": "gpc"}}]}
        )
    store = RunStore()
    store.apply_spec(parse_spec(spec), spec_dir=folder)
    report = execute_run(store.request_run(project, "cli"))
    assert report["status"] == "SUCCEEDED", report["error"]
    return company, project, TokenStore().create(company)


@pytest.fixture(scope="module")
def shop(root: Path) -> tuple[str, str, str]:
    return company_with_shop(root)


def view(page: Any, name: str) -> None:
    page.click(f"#view-tabs button[data-view={name}]")
    page.wait_for_selector(f"#view-{name}:not([hidden])")


# --- create a project ---------------------------------------------------------------------------------------


def test_a_project_is_created_from_the_form_and_from_yaml_with_its_problems_at_their_lines(
    root: Path, open_page: Callable[[str], Any]
) -> None:
    company = "ws_" + uuid.uuid4().hex[:8]
    (root / company).mkdir(parents=True)
    write_csv(root / company / "main.csv", ["id", "title"], [["A1", "Shoe"], ["A2", "Boot"]])
    page = open_page(TokenStore().create(company))
    page.wait_for_selector("#no-projects:not([hidden])")

    # The form: a source, a rule, an export; created through PUT, then shown in the spec view.
    project = "new_" + uuid.uuid4().hex[:8]
    page.click("#new-project")
    page.get_by_label("Project id").fill(project)
    page.get_by_label("Schedule (cron, UTC)").fill("0 6 * * *")
    page.get_by_label("Source 1 URL or file").fill("main.csv")
    page.click("text=Add rule")
    page.get_by_label("Rule 1 name").fill("shout")
    page.get_by_label("Rule 1: set field").fill("title")
    page.get_by_label("Rule 1: to the value").fill("{title}!")
    page.get_by_label("Export 1 file").fill("out.csv")
    page.click("#new-create")
    page.wait_for_selector(f"#projects li[data-project={project}]")
    page.wait_for_selector("#view-spec:not([hidden])")
    expect(page.locator("#spec-yaml")).to_have_value(re.compile("shout"))
    stored = RunStore().project(project, company=company).spec
    assert stored["schedule"] == "0 6 * * *"
    assert stored["rules"] == [{"name": "shout", "then": [{"set": "title", "value": "{title}!"}]}]
    assert [(e["name"], e["path"]) for e in stored["exports"]] == [("feed", "out.csv")]

    # As YAML: a mistake is listed at its line with a suggestion, and choosing it puts the caret there.
    second = "yaml_" + uuid.uuid4().hex[:8]
    page.click("#new-project")
    page.get_by_label("Project id").fill(second)
    page.get_by_label("Source 1 URL or file").fill("main.csv")
    page.click("#new-as-yaml")
    text = page.input_value("#new-yaml")
    assert f"project: {second}" in text and "format: csv" in text
    page.fill("#new-yaml", text.replace("format: csv", "format: cvs"))
    problem = page.wait_for_selector("#view-new .problem-link")
    line = text.splitlines().index("    format: csv") + 1
    assert page.get_attribute("#view-new .problem", "data-line") == str(line)
    assert "exports[0].format" in (problem.text_content() or "")
    problem.click()
    caret_line = page.evaluate(
        "(() => { const t = document.getElementById('new-yaml');"
        " return t.value.slice(0, t.selectionStart).split('\\n').length; })()"
    )
    assert caret_line == line
    assert page.evaluate("document.activeElement.id") == "new-yaml"
    # Tab indents in the box: how to leave it from the keyboard is in its description (WCAG 2.1.2), and works.
    described = page.get_attribute("#new-yaml", "aria-describedby") or ""
    assert any("Escape" in (page.text_content(f"[id='{i}']") or "") for i in described.split())
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") != "new-yaml"
    page.fill("#new-yaml", text)
    page.wait_for_selector("#new-yaml-status.note-ok")
    page.click("#new-create")
    page.wait_for_selector(f"#projects li[data-project={second}]")
    assert RunStore().project(second, company=company).spec["sources"][0]["url"] == "main.csv"


# --- the rule editor ----------------------------------------------------------------------------------------


def test_editing_a_rule_changes_the_preview_grid_with_each_cells_why(
    root: Path, open_page: Callable[[str], Any]
) -> None:
    company, project, token = company_with_shop(root)  # its own: the test saves the rule it edits
    page = open_page(token)
    view(page, "rules")
    page.wait_for_selector("#rule-grid tbody tr")
    # The first rule is open in the form; its cells are marked as changed, with words as well as colour.
    cell = page.locator("#rule-grid tr[data-item=A1] td.changed", has_text="out of stock")
    assert cell.count() == 1
    assert "(changed)" in (cell.text_content() or "")
    assert [t.strip() for t in page.locator("#rule-excluded li").all_text_contents()] == ["T9 excluded by drop tests"]
    # The cell's "why" opens on keyboard focus, not only on hover.
    cell.focus()
    why = cell.locator(".why")
    assert why.is_visible() and why.text_content() == "set by rule out of stock"
    # and is seen, not clipped by its cell: the point at its middle is the tooltip itself.
    on_top = why.evaluate(
        "(w) => { const r = w.getBoundingClientRect();"
        " return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === w; }"
    )
    assert on_top

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-rules.png"), full_page=True)
    # `$&` is text, not a replacement pattern, wherever the page splices a rule into the draft.
    page.get_by_label("Action 1 value").fill("sold out $&")
    page.wait_for_selector("#rule-grid tr[data-item=A1] td.changed >> text=sold out $&")
    assert page.locator("#rule-grid tr[data-item=A2] td.changed").count() == 0
    # Another kind of action draws its own inputs; back to `set`, the value typed before is still there.
    page.get_by_label("Action 1", exact=True).select_option("uppercase")
    page.wait_for_selector("#rule-grid tr[data-item=A1] td.changed >> text=IN STOCK")
    assert page.get_by_label("Action 1 value").count() == 0
    page.get_by_label("Action 1", exact=True).select_option("set")
    assert page.get_by_label("Action 1 value").input_value() == "sold out $&"
    page.wait_for_selector("#rule-grid tr[data-item=A1] td.changed >> text=sold out $&")
    # The rule's YAML is the same draft; saving it stores the rule.
    page.check("#rule-mode-yaml")
    assert 'value: "sold out $&"' in page.input_value("#rule-yaml")
    page.fill("#rule-yaml", page.input_value("#rule-yaml").replace('"sold out $&"', "gone"))
    page.wait_for_selector("#rule-grid tr[data-item=A1] td.changed >> text=gone")
    page.click("#rule-save")
    page.wait_for_selector("#rule-note.note-ok")
    rules = RunStore().project(project, company=company).spec["rules"]
    assert rules[0]["then"] == [{"set": "availability", "value": "gone"}]
    assert rules[1]["name"] == "drop tests"


# --- spec versions --------------------------------------------------------------------------------------------


def test_an_older_spec_version_is_viewed_and_restored(root: Path, open_page: Callable[[str], Any]) -> None:
    company, project, token = company_with_shop(root, rule="first rule")
    store = RunStore()
    doc = store.project(project, company=company).spec
    doc["rules"][0]["name"] = "second rule"
    store.apply_spec(parse_spec(doc), spec_dir=root / company)
    page = open_page(token)
    view(page, "spec")
    expect(page.locator("#spec-yaml")).to_have_value(re.compile("second rule"))
    rows = page.locator("#spec-versions tbody tr")
    page.wait_for_selector("#spec-versions tbody tr >> nth=1")
    assert rows.count() == 2
    older = rows.nth(1)
    version = older.get_attribute("data-version")
    older.locator(".view-version").click()
    page.wait_for_selector("#version-view:not([hidden])")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-spec.png"), full_page=True)
    assert "first rule" in (page.text_content("#version-yaml") or "")
    older.locator(".restore-version").click()
    page.wait_for_selector("#spec-note.note-ok")
    expect(page.locator("#spec-yaml")).to_have_value(re.compile("first rule"))
    assert store.project(project, company=company).spec["rules"][0]["name"] == "first rule"
    # The same document is the same version again (spec_versions keeps one row per document): now current.
    page.wait_for_selector(f"#spec-versions tr.selected[data-version='{version}']")

    # Edited as text and saved: a third version, current, with the text as typed.
    text = page.input_value("#spec-yaml")
    page.fill("#spec-yaml", text.replace("first rule", "third rule"))
    assert page.text_content("#spec-note") == "unsaved changes"
    page.wait_for_selector("#spec-yaml-status.note-ok")
    page.click("#spec-save")
    page.wait_for_selector("#spec-versions tbody tr >> nth=2")
    assert store.project(project, company=company).spec["rules"][0]["name"] == "third rule"
    assert page.locator("#spec-versions tbody tr").first.get_attribute("class") == "selected"


def test_the_spec_edited_as_a_form_keeps_every_key_the_form_does_not_show(
    root: Path, open_page: Callable[[str], Any]
) -> None:
    company, project, token = company_with_shop(root)
    store = RunStore()
    before = store.project(project, company=company).spec
    page = open_page(token)
    view(page, "spec")
    expect(page.locator("#spec-yaml")).to_have_value(re.compile("out of stock"))
    page.check("#spec-mode-form")
    spec_view = page.locator("#view-spec")
    assert spec_view.get_by_label("Export 2 format").input_value() == "google-xml"
    spec_view.get_by_label("Schedule (cron, UTC)").fill("0 5 * * *")
    spec_view.get_by_label("Export 1 file").fill("renamed.csv")
    spec_view.get_by_role("button", name="Add lookup").click()
    spec_view.get_by_label("Lookup 1 name").fill("cats")
    spec_view.get_by_label("Lookup 1 key column").fill("code")
    page.click("#spec-save")
    page.wait_for_selector("#spec-note.note-ok")
    after = store.project(project, company=company).spec
    assert after["schedule"] == "0 5 * * *"
    assert after["exports"][0] == dict(before["exports"][0], path="renamed.csv")
    assert after["exports"][1] == before["exports"][1]  # its max_invalid, which the form does not show, kept
    assert after["rules"] == before["rules"]
    assert after["lookups"] == [{"name": "cats", "key": "code", "rows": []}]
    # Back in the text, the saved document.
    expect(page.locator("#spec-yaml")).to_have_value(re.compile("renamed.csv"))
    assert page.is_checked("#spec-mode-text")


# --- feeds ------------------------------------------------------------------------------------------------------


def test_a_feed_is_downloaded_with_its_url_and_findings(
    root: Path, shop: tuple[str, str, str], open_page: Callable[[str], Any]
) -> None:
    _, _, token = shop
    page = open_page(token)
    view(page, "feeds")
    block = page.locator("#feeds section.feed[data-export=csv]")
    block.wait_for()
    assert "/feeds/" in (block.locator(".feed-url").text_content() or "")
    with page.expect_download() as download:
        block.locator("button.download").click()
    path = download.value.path()
    assert download.value.suggested_filename == "out.csv"
    assert Path(path).read_bytes().splitlines()[0].startswith(b"id,")
    google = page.locator("#feeds section.feed[data-export=google]")
    assert google.locator(".feed-findings tbody tr").count() > 0


def test_the_project_s_alerts_show_under_its_feeds_as_text_with_the_host_but_not_the_url_s_path(
    root: Path, shop: tuple[str, str, str], open_page: Callable[[str], Any]
) -> None:
    from firefeed.alerts import outbox
    from firefeed.db.engine import get_engine

    company, project, token = shop
    run_id = str(RunStore().runs_of_project(project, 1)[0].id)
    hook = "https://hooks.example.com:8443/T0/secret-path-token?k=1"
    (alert_id,) = outbox.record(
        get_engine(), [outbox.NewAlert(company, project, run_id, "failed", "", hook, "ALERTS_KEY", b"{}")]
    )
    outbox.failed(get_engine(), alert_id, outbox.Outcome(404, "answered 404: " + HOSTILE, 12))
    page = open_page(token)
    view(page, "feeds")
    row = page.locator("#project-alerts table.alerts tbody tr")
    row.wait_for()
    cells = row.first.locator("td").all_text_contents()
    assert (cells[0], cells[2], cells[3], cells[4]) == ("failed", "hooks.example.com:8443", "failed", "0")
    assert cells[5] == "answered 404: answered 404: " + HOSTILE
    section = page.text_content("#project-alerts") or ""
    assert "secret-path-token" not in section and "ALERTS_KEY" not in section
    assert page.locator("#project-alerts img").count() == 0


# --- hostile names, other companies -----------------------------------------------------------------------------


def test_a_hostile_companys_names_and_values_are_text_in_every_view(
    root: Path, open_page: Callable[[str], Any]
) -> None:
    _, _, token = company_with_shop(root, name="x", rule="r", hostile=True)
    page = open_page(token)
    markup = "#workspace img, #workspace script"
    page.wait_for_selector("#projects li")
    assert HOSTILE in (page.text_content("#projects") or "")
    view(page, "spec")
    expect(page.locator("#spec-yaml")).to_have_value(re.compile("onerror"))
    view(page, "rules")
    page.wait_for_selector("#rule-grid tbody tr")
    assert page.locator("#rule-list li").first.text_content() == "r" + HOSTILE
    assert HOSTILE in (page.text_content("#rule-grid") or "")
    view(page, "values")
    page.get_by_label("Field", exact=True).fill("cat")
    page.click("#values-form button[type=submit]")
    page.wait_for_selector("#values-table tbody tr")
    assert "Hats" + HOSTILE in page.locator("#values-table tbody tr td").all_text_contents()
    mapping = page.locator("#unmatched form.mapping")
    assert mapping.get_attribute("data-lookup") == "cats" + HOSTILE
    assert "Hats" + HOSTILE in mapping.locator("tbody td").all_text_contents()
    assert f"Lookup cats{HOSTILE} — rule gpc{HOSTILE}" in (mapping.locator("h4").text_content() or "")
    view(page, "items")
    page.get_by_label("Item key", exact=True).fill("A1")
    page.click("#item-form button[type=submit]")
    page.wait_for_selector("#item-view h3")
    assert HOSTILE in (page.text_content("#item-view") or "")
    view(page, "feeds")
    page.wait_for_selector("#feeds section.feed")
    assert page.locator("#feeds section.feed h3").first.text_content() == "Export csv" + HOSTILE
    page.click("#open-settings")
    page.wait_for_selector("#schedules-table tbody tr")
    assert page.locator(markup).count() == 0


def test_another_companys_projects_are_not_seen_or_reached_from_the_page(
    root: Path, shop: tuple[str, str, str], open_page: Callable[[str], Any]
) -> None:
    _, project, _ = shop
    _, own, token = company_with_shop(root)
    page = open_page(token)
    page.wait_for_selector(f"#projects li[data-project={own}]")
    assert page.locator("#projects li").count() == 1
    # Every route the page calls, with this tab's token, for the other company's project: 404.
    statuses = page.evaluate(
        """async ([project, spec]) => {
            const token = sessionStorage.getItem("firefeed.token");
            const routes = [
                ["GET", ""], ["GET", "/spec"], ["GET", "/versions"], ["GET", "/versions/1"],
                ["POST", "/versions/1/restore"], ["POST", "/validate"], ["POST", "/preview"],
                ["GET", "/values?field=title"], ["GET", "/items/A1"], ["GET", "/lookups/cats/unmatched"],
                ["GET", "/feed-urls"], ["GET", "/exports/csv/file"], ["GET", "/exports/google/findings"],
                ["GET", "/pipeline/runs"], ["POST", "/lookups/cats/rows"], ["PUT", ""], ["GET", "/alerts"],
            ];
            const out = {}, rows = { rows: [] };
            for (const [method, tail] of routes) {
                const r = await fetch("/api/projects/" + project + tail, {
                    method, headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
                    // A spec body is a valid one of this company naming that project (refused for whose it is).
                    body: method === "GET" ? undefined : JSON.stringify(tail.includes("/lookups") ? rows : spec),
                });
                out[method + " " + tail] = r.status;
            }
            return out;
        }""",
        [project, dict(RunStore().project(own).spec, project=project)],
    )
    assert statuses == {k: 404 for k in statuses}, statuses


# --- company settings ------------------------------------------------------------------------------------------


def test_settings_create_a_token_shown_once_revoke_it_with_its_children_set_a_secret_and_a_schedule(
    root: Path, server: str, open_page: Callable[[str], Any]
) -> None:
    company, project, token = company_with_shop(root)
    tokens = TokenStore()
    spare = tokens.create(company)
    page = open_page(token)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.click("#open-settings")
    page.wait_for_selector("#tokens-table tbody tr >> nth=1")
    assert f"firefeed token create --company {company}" in (page.text_content("#token-create-hint") or "")
    ids = {t.prefix: t.id for t in tokens.list(company)}
    tab_id, spare_id = (next(i for p, i in ids.items() if t.startswith(p)) for t in (token, spare))
    assert page.text_content(f"#tokens-table tr[data-token-id='{spare_id}'] td:nth-child(3)") == "operator"
    # A token made from the page: shown once in a read-only field (copied from there), its name as text.
    page.get_by_label("Token name").fill(HOSTILE)
    page.get_by_label("Expires in days").fill("30")
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("#token-created:not([hidden])")
    made = page.input_value("#token-new")
    assert made.startswith("ff_") and len(made) > 40
    assert page.locator("#token-new").get_attribute("readonly") is not None
    assert "shown once" in (page.text_content("#token-once") or "").lower()
    page.click("#token-copy")
    expect(page.locator("#token-copy")).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == made
    made_id = next(t.id for t in tokens.list(company) if made.startswith(t.prefix))
    row = f"#tokens-table tr[data-token-id='{made_id}']"
    page.wait_for_selector(row)
    assert page.text_content(f"{row} td:nth-child(2)") == HOSTILE
    assert page.text_content(f"{row} td:nth-child(3)") == f"created by #{tab_id}"
    assert page.locator("#tokens-table img, #tokens-table script").count() == 0
    kept = "JSON.stringify(sessionStorage) + JSON.stringify(localStorage) + location.href + document.body.innerText"
    assert made not in page.evaluate(kept) and made not in page.content()
    # It works against the API, and a token it creates is its child.
    api = page.request
    assert api.get(server + "/api/projects", headers={"Authorization": f"Bearer {made}"}).status == 200
    child = api.post(server + "/api/tokens", headers={"Authorization": f"Bearer {made}"}, data={"name": "child"})
    assert child.status == 201
    grandchild = child.json()["token"]
    # Leaving the view drops it: back in settings it is not shown again.
    page.click("#new-project")
    page.wait_for_selector("#view-new:not([hidden])")
    assert page.input_value("#token-new") == ""
    page.click("#open-settings")
    page.wait_for_selector(f"#tokens-table tr[data-token-id='{child.json()['id']}']")
    assert page.locator("#token-created").is_hidden()
    # Revoking asks twice (no dialog) and says it revokes the tokens it created: the child is refused too.
    button = page.locator(f"{row} button")
    button.click()
    expect(button).to_have_text("Press again to revoke it and the tokens it created")
    button.click()
    page.wait_for_selector(f"#tokens-table tr[data-token-id='{child.json()['id']}'][data-state=revoked]")
    for revoked in (made, grandchild):
        assert api.get(server + "/api/projects", headers={"Authorization": f"Bearer {revoked}"}).status == 401
    assert tokens.verify(spare) == company and tokens.verify(token) == company
    secret = "s3cr3t-" + uuid.uuid4().hex
    page.get_by_label("Secret name").fill("SHOP_KEY")
    page.get_by_label("Secret value").fill(secret)
    page.click("#secret-form button[type=submit]")
    page.wait_for_selector("#secrets-table tbody tr[data-secret=SHOP_KEY]")
    assert "${secret:SHOP_KEY}" in (page.text_content("#secrets-note") or "")
    assert page.input_value("#secret-value") == ""
    assert secret not in page.content()
    assert secret not in page.evaluate("JSON.stringify(sessionStorage) + document.body.innerText")
    # A schedule is the spec's `schedule:` line, saved into the spec's own text.
    page.get_by_label(f"schedule of {project}").fill("15 3 * * *")
    page.click(f"#schedules-table tr[data-project={project}] button")
    page.wait_for_selector("#schedules-note.note-ok")
    spec = RunStore().project(project, company=company).spec
    assert spec["schedule"] == "15 3 * * *"
    assert [r["name"] for r in spec["rules"]] == ["out of stock", "drop tests"]


# --- values and the category mapping ------------------------------------------------------------------------------


def test_unmatched_lookup_values_become_rows_of_the_lookup_and_the_next_run_matches_them(
    root: Path, open_page: Callable[[str], Any]
) -> None:
    company, project = "ws_" + uuid.uuid4().hex[:8], "cats_" + uuid.uuid4().hex[:8]
    folder = root / company
    folder.mkdir(parents=True)
    write_csv(folder / "main.csv", ["id", "cat"], [["1", "Rings"], ["2", "Hats"], ["3", "Hats"], ["4", "Socks"]])
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "lookups": [{"name": "cats", "key": "code", "rows": [{"code": "Rings", "gpc": "Jewelry > Rings"}]}],
        "rules": [{"name": "gpc", "then": [{"lookup": "cats", "match": "cat", "set": {"gpc": "gpc"}}]}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    store = RunStore()
    store.apply_spec(parse_spec(spec), spec_dir=folder)
    assert execute_run(store.request_run(project, "cli"))["status"] == "SUCCEEDED"
    page = open_page(TokenStore().create(company))
    view(page, "values")
    form = page.locator("#unmatched form.mapping[data-lookup=cats]")
    form.wait_for()
    assert form.locator("tbody tr td:first-child").all_text_contents() == ["Hats", "Socks"]
    page.get_by_label("gpc for Hats").fill("Apparel > Hats")
    form.locator("button.add-rows").click()
    form.locator(".note-ok").wait_for()
    rows = store.project(project, company=company).spec["lookups"][0]["rows"]
    assert rows == [{"code": "Rings", "gpc": "Jewelry > Rings"}, {"code": "Hats", "gpc": "Apparel > Hats"}]

    # "Run now" requests the run; this test is the worker that drives it, and the page shows the new counts.
    form.locator("button.run-now").click()
    page.wait_for_selector("#unmatched-note >> text=accepted")
    run_id = str(store.runs_of_project(project)[0].id)
    assert execute_run(run_id)["status"] == "SUCCEEDED"
    page.wait_for_selector("#unmatched-note.note-ok")
    assert page.text_content("#unmatched-note") == "run succeeded: cats matched 3, unmatched 1"
    assert page.locator("#unmatched form.mapping tbody tr td:first-child").all_text_contents() == ["Socks"]
    view(page, "values")
    page.get_by_label("Field", exact=True).fill("gpc")
    page.click("#values-form button[type=submit]")
    page.wait_for_selector("#values-table tbody tr >> nth=1")
    assert page.locator("#values-table tbody tr td").all_text_contents()[:2] == ["Apparel > Hats", "2"]
    # The lookup action opens in the rule form, and the preview reads the rows the page added.
    view(page, "rules")
    page.wait_for_selector("#rule-grid tr[data-item='2'] td.changed >> text=Apparel > Hats")
    assert page.get_by_label("Action 1 lookup").input_value() == "cats"
    assert page.get_by_label("Action 1 match field").input_value() == "cat"
    assert page.get_by_label("Action 1 to the lookup's column").input_value() == "gpc"


def test_unmatched_values_of_an_exports_own_lookup_action_are_offered_too(
    root: Path, open_page: Callable[[str], Any]
) -> None:
    """An export's own rules (channel rules) may look values up as well; the page said "every lookup value
    matched" when only such an action missed, and offered no rows to add for it."""
    company, project = "ws_" + uuid.uuid4().hex[:8], "xcats_" + uuid.uuid4().hex[:8]
    folder = root / company
    folder.mkdir(parents=True)
    write_csv(folder / "main.csv", ["id", "cat"], [["1", "Rings"], ["2", "Hats"]])
    rule = {"name": "gpc here", "then": [{"lookup": "cats", "match": "cat", "set": {"gpc": "gpc"}}]}
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "lookups": [{"name": "cats", "key": "code", "rows": [{"code": "Rings", "gpc": "Jewelry > Rings"}]}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv", "rules": [rule]}],
    }
    store = RunStore()
    store.apply_spec(parse_spec(spec), spec_dir=folder)
    assert execute_run(store.request_run(project, "cli"))["status"] == "SUCCEEDED"
    page = open_page(TokenStore().create(company))
    view(page, "values")
    form = page.locator("#unmatched form.mapping[data-lookup=cats]")
    form.wait_for()
    assert "export csv" in (form.locator("h4").text_content() or "")
    assert form.locator("tbody tr td:first-child").all_text_contents() == ["Hats"]
    page.get_by_label("gpc for Hats").fill("Apparel > Hats")
    form.locator("button.add-rows").click()
    form.locator(".note-ok").wait_for()
    rows = store.project(project, company=company).spec["lookups"][0]["rows"]
    assert rows[-1] == {"code": "Hats", "gpc": "Apparel > Hats"}


# --- items --------------------------------------------------------------------------------------------------------


def test_an_item_is_shown_per_source_after_each_rule_and_per_export(
    shop: tuple[str, str, str], open_page: Callable[[str], Any]
) -> None:
    _, project, token = shop
    page = open_page(token)
    view(page, "items")
    page.get_by_label("Item key", exact=True).fill("A1")
    page.click("#item-form button[type=submit]")
    page.wait_for_selector("#item-view .item-export")
    assert page.locator("table.item-source tr[data-field=quantity] td").all_text_contents() == ["0"]
    trail = page.locator("ol.item-rules > li").all_inner_texts()
    assert trail[0].startswith("out of stock") and "availability: in stock → out of stock" in trail[0]
    after = page.locator("table.item-after tr[data-field=availability] td").all_text_contents()
    assert after == ["out of stock ✎ changed", "rule out of stock"]
    assert page.locator("table.item-after tr[data-field=title] td").all_text_contents() == ["Shoe", "source main"]
    google = page.locator("#item-view .item-export[data-export=google]")
    assert google.locator("table.item-findings tbody tr").count() > 0
    page.get_by_label("Item key", exact=True).fill("nope")
    page.click("#item-form button[type=submit]")
    page.wait_for_selector(f"#item-note.note-bad >> text=no source of project {project!r} has an item 'nope'")


# --- accessibility --------------------------------------------------------------------------------------------------

#: Visible controls without an accessible name, visible text whose contrast with its background is under
#: WCAG AA (4.5:1; 3:1 for large text; the background is the first opaque one among the element's ancestors),
#: and table headers aligned otherwise than their column's values.
A11Y_PROBLEMS = """() => {
    const visible = (e) => e.offsetParent !== null && getComputedStyle(e).visibility !== "hidden";
    const unlabelled = [...document.querySelectorAll("input, select, textarea, button")]
        .filter((c) => visible(c) && c.type !== "hidden")
        .filter((c) => !(c.labels && c.labels.length) && !c.getAttribute("aria-label")
            && !c.getAttribute("aria-labelledby") && !(c.tagName === "BUTTON" && c.textContent.trim()))
        .map((c) => c.outerHTML.slice(0, 80));
    const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
    const lum = ([r, g, b]) => [r, g, b].map((v) => v / 255)
        .map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4))
        .reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
    const background = (e) => {
        for (let n = e; n; n = n.parentElement) {
            const c = rgb(getComputedStyle(n).backgroundColor);
            if (c.length === 3 || (c.length === 4 && c[3] === 1)) return c.slice(0, 3);
        }
        return [255, 255, 255];
    };
    const low = [];
    for (const e of document.querySelectorAll("#main *, header *")) {
        const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
        if (!own || !visible(e) || e.closest("[disabled], .why, .visually-hidden")) continue;
        const style = getComputedStyle(e);
        const a = lum(rgb(style.color)), b = lum(background(e));
        const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
        const size = parseFloat(style.fontSize);
        const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
        const text = e.textContent.trim().slice(0, 30);
        if (ratio < (large ? 3 : 4.5)) low.push(`${e.tagName}.${e.className} ${ratio.toFixed(2)}: ${text}`);
    }
    // Each header sits where its column's values do (#48): a right-aligned number under a left header reads
    // as the next column's.
    const misaligned = [...document.querySelectorAll("table")].filter(visible).flatMap((t) => {
        const row = t.tBodies[0] && t.tBodies[0].rows[0];
        if (!row || !t.tHead) return [];
        return [...t.tHead.rows[0].cells].flatMap((th, i) => {
            const td = row.cells[i];
            const a = getComputedStyle(th).textAlign, b = td ? getComputedStyle(td).textAlign : a;
            return a === b ? [] : [`${t.id || t.className}: ${th.textContent} ${a} over ${b}`];
        });
    });
    return { unlabelled, low, misaligned };
}"""


def test_every_view_has_named_controls_aa_contrast_and_works_from_the_keyboard(
    shop: tuple[str, str, str], open_page: Callable[[str], Any]
) -> None:
    _, project, token = shop
    page = open_page(token)
    page.wait_for_selector("#runs tbody tr")
    problems = {"runs": page.evaluate(A11Y_PROBLEMS)}
    # The tabs are buttons: focused with Tab and pressed with Enter or Space, the view's heading takes the focus.
    page.focus("#view-tabs button[data-view=runs]")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.wait_for_selector("#view-spec:not([hidden])")
    assert page.evaluate("document.activeElement.id") == "spec-heading"
    page.focus("#view-tabs button[data-view=rules]")
    page.keyboard.press("Space")
    page.wait_for_selector("#rule-grid tbody tr")
    # A grid cell is reached with Tab, and its "why" shows while it has the focus.
    page.focus("#rule-grid tbody tr:first-child td.cell")
    page.keyboard.press("Tab")
    focused_why = page.evaluate("document.activeElement.querySelector('.why').offsetParent !== null")
    assert focused_why
    problems["rules"] = page.evaluate(A11Y_PROBLEMS)
    for name, ready in [("spec", "#spec-versions tbody tr"), ("values", "#unmatched p"), ("feeds", "#feeds section")]:
        view(page, name)
        page.wait_for_selector(ready)
        problems[name] = page.evaluate(A11Y_PROBLEMS)
    view(page, "items")
    page.get_by_label("Item key", exact=True).fill("A2")
    page.keyboard.press("Enter")
    page.wait_for_selector("#item-view .item-export")
    problems["items"] = page.evaluate(A11Y_PROBLEMS)
    page.click("#open-settings")
    page.wait_for_selector("#schedules-table tbody tr")
    problems["settings"] = page.evaluate(A11Y_PROBLEMS)
    page.click("#new-project")
    problems["new"] = page.evaluate(A11Y_PROBLEMS)
    assert {k: v for k, v in problems.items() if any(v.values())} == {}
    # Landmarks and the live region the async results are announced in.
    assert page.locator("header, main, nav#projects-pane, nav#view-tabs, #live[aria-live=polite]").count() == 5
    assert project in (page.text_content("#projects") or "")


# --- the page's YAML writer ---------------------------------------------------------------------------------------


def test_the_yaml_the_page_writes_reads_back_as_the_same_texts(browser: Any, server: str) -> None:
    """js/yaml.js writes what the forms build; the spec loader (BaseLoader: every scalar a text) must read back
    each text exactly, whatever characters a merchant typed."""
    import yaml

    texts = [
        "plain", "x: y", "- z", "# not a comment", "a #b", "{price} EUR", "50%", " lead", "trail ", "@at", "`tick`",
        "a\nb", "tab\there", "it's", 'say "hi"', "yes", "No", "null", "~", "010", "1.10", "1e3", "-5", "é ü 漢字 😀",
        "http://h:1/x?a=b#c", "${secret:KEY}", "[list]", "*alias", "&anchor", "!tag", "|", ">", "?", "", "a, b",
        HOSTILE, "\\back\\slash", "\u2028sep", "nel\x85", "del\x7f", "\ufeffbom",
    ]  # fmt: skip
    doc = {
        "rules": [{"name": t, "when": {"field": "f", "op": "eq", "value": t}} for t in texts],
        "map": dict.fromkeys(texts, "v"),
    }
    page = browser.new_page()
    try:
        page.goto(server + "/")
        written = page.evaluate("async (doc) => (await import('/web/js/yaml.js')).toYaml(doc)", doc)
    finally:
        page.close()
    assert yaml.load(written, Loader=yaml.BaseLoader) == doc


def test_a_null_the_page_writes_is_left_out_not_read_back_as_the_text_null(browser: Any, server: str) -> None:
    """The Rules view writes the stored spec (GET .../projects/{id}, JSON) back as YAML; a spec PUT as JSON may
    hold `"format": null`, which as `format: null` the loader reads as the text "null" (every save refused)."""
    import yaml

    doc = {"schedule": None, "sources": [{"name": "main", "format": None, "opts": {"a": None}}], "name": "x"}
    page = browser.new_page()
    try:
        page.goto(server + "/")
        written = page.evaluate("async (doc) => (await import('/web/js/yaml.js')).toYaml(doc)", doc)
    finally:
        page.close()
    assert yaml.load(written, Loader=yaml.BaseLoader) == {"sources": [{"name": "main", "opts": {}}], "name": "x"}
