"""Sync to the Merchant API (SPEC 10 C9-C10) through real runs, against the stand-in on 127.0.0.1.

Each run that publishes sends its export's changes as the run's sync job, through the Google client
(service-account credentials from a company secret, the stand-in's token endpoint), paced, with the
answers in the ledger and the report: inserts and updates, deletes (also of an item whose insert was
refused), quota answers that lose nothing, the channel's item issues against FireFeed's own checks,
`firefeed sync status` and `repair` after changes behind FireFeed's back, the API's answers scoped to
the company, and the credentials' secret nowhere in a report, a log line or an error.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import text

from firefeed.config import reset_settings
from firefeed.secrets.crypto import generate_key
from tests.integration.conftest import cli, new_company
from tests.integration.file_servers import company_with
from tests.standins.merchant_api import MerchantStandIn, running

pytestmark = pytest.mark.integration

SHOP = "https://www.shoeshop-firenze.it/p"
GOOD_GTIN = "4006381333931"
BAD_GTIN = "4006381333932"


@pytest.fixture()
def merchant(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MerchantStandIn]:
    with running() as standin:
        monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
        monkeypatch.setenv("FIREFEED_GOOGLE_MERCHANT_URL", standin.url)
        monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
        monkeypatch.setenv("FIREFEED_SYNC_MAX_S", "30")
        reset_settings()
        yield standin
    reset_settings()


def write_project(
    folder: Path,
    company: str,
    project: str,
    rows: dict[str, tuple[str, str, str]],
    credentials: str = "${secret:GSA}",
    max_drop: int = 100,
    alerts: list[dict[str, Any]] | None = None,
) -> Path:
    """A google-xml export with sync; rows: key -> (title, price, gtin)."""
    feed = folder / f"{project}.csv"
    lines = ["id,title,description,availability,condition,price,gtin,link,image_link,brand"]
    for k, (title, price, gtin) in rows.items():
        lines.append(f"{k},{title},{title} of ours,in stock,new,{price},{gtin},{SHOP}/{k},{SHOP}/{k}.jpg,Acme")
    feed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": str(feed), "format": "csv"}],
        "exports": [
            {
                "name": "google",
                "format": "google-xml",
                "path": "google.xml",
                "max_drop": max_drop,
                "max_invalid": 100,
                "sync": {
                    "to": "google-merchant",
                    "account": "1234567",
                    "data_source": "7654321",
                    "content_language": "it",
                    "feed_label": "IT",
                    "credentials": credentials,
                },
            }
        ],
    }
    if alerts:
        spec["alerts"] = alerts
    path = folder / f"{project}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def run(path: Path) -> dict[str, Any]:
    _code, out = cli("run", str(path), "--json")
    report: dict[str, Any] = json.loads(out)
    assert report["status"] == "SUCCEEDED", report.get("error")
    return report


def synced(report: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = report["exports"][0]["sync"]
    return found


def counts(doc: dict[str, Any]) -> tuple[int, int, int, int, int]:
    return doc["inserted"], doc["updated"], doc["deleted"], doc["failed"], doc["pending"]


def new_project(standin: MerchantStandIn) -> tuple[str, str, str]:
    sa = standin.service_account_json()
    return company_with(GSA=sa), "p_" + uuid.uuid4().hex[:10], sa


def test_runs_send_new_changed_and_removed_items_and_google_says_is_counted_against_firefeeds_checks(
    merchant: MerchantStandIn, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    company, project, sa = new_project(merchant)
    rows = {
        "A": ("Shoe", "10.00 EUR", GOOD_GTIN),
        "B": ("Hat", "5.00 EUR", GOOD_GTIN),
        "C": ("Bag", "30 EUR", BAD_GTIN),
    }
    path = write_project(tmp_path, company, project, rows)

    first = run(path)
    assert counts(synced(first)) == (3, 0, 0, 0, 0), synced(first)
    held = merchant.products()
    assert set(held) == {"A", "B", "C"}
    assert held["A"]["productAttributes"]["title"] == "Shoe"
    assert (held["A"]["contentLanguage"], held["A"]["feedLabel"]) == ("it", "IT")
    # Google's word: C's GTIN has a wrong check digit; FireFeed's own Google checks flagged C too.
    issues = synced(first)["channel_issues"]
    assert issues["codes"] == {"invalid_upc": 1} and issues["items"] == 1 and issues["flagged_by_firefeed"] == 1

    merchant.requests.clear()
    second = run(path)  # nothing changed: nothing sent
    assert counts(synced(second)) == (0, 0, 0, 0, 0)
    assert [r for r in merchant.requests if r.method in ("POST", "DELETE") and r.offer_id] == []

    rows = {"A": ("Shoe", "12.00 EUR", GOOD_GTIN), "C": ("Bag", "30 EUR", BAD_GTIN), "D": ("Belt", "9 EUR", GOOD_GTIN)}
    write_project(tmp_path, company, project, rows)
    third = run(path)
    assert counts(synced(third)) == (1, 1, 1, 0, 0), synced(third)
    assert set(merchant.products()) == {"A", "C", "D"}
    assert merchant.products()["A"]["productAttributes"]["price"]["amountMicros"] == "12000000"

    code, out = cli("sync", "status", project, "--json")
    (status,) = json.loads(out)
    assert code == 0 and (status["export"], status["to"], status["items"], status["pending"]) == (
        "google",
        "google-merchant",
        3,
        0,
    )
    assert status["last_sync"]["deleted"] == 1 and status["channel_issues"]["codes"] == {"invalid_upc": 1}

    key = json.loads(sa)["private_key"]
    secret_bits = [key, key.splitlines()[1]] + [t for t in merchant.issued]
    for doc in (first, second, third, status):
        assert not any(bit in json.dumps(doc) for bit in secret_bits)
    assert not any(bit in caplog.text for bit in secret_bits)


def test_quota_answers_slow_the_sender_and_every_item_arrives_once(
    merchant: MerchantStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    company, project, _ = new_project(merchant)
    rows = {f"K{i:03d}": (f"Item {i}", "1 EUR", GOOD_GTIN) for i in range(40)}
    path = write_project(tmp_path, company, project, rows)
    merchant.retry_after = 0.2
    monkeypatch.setenv("FIREFEED_GOOGLE_MERCHANT_REQUESTS_PER_MINUTE", "60000")  # 970/s: halved 4 times, still quick
    reset_settings()
    merchant.fail_next(4, code=429, status="RESOURCE_EXHAUSTED")
    report = run(path)
    assert counts(synced(report)) == (40, 0, 0, 0, 0), synced(report)
    assert set(merchant.products()) == set(rows)
    took = Counter(r.offer_id for r in merchant.requests if r.method == "POST" and r.status == 200)
    assert set(took.values()) == {1}  # every item taken exactly once; refused calls were sent again
    assert merchant.by_status[429] == 4


def test_a_delete_of_an_item_whose_insert_was_refused_is_sent_and_sticks(
    merchant: MerchantStandIn, tmp_path: Path
) -> None:
    company, project, _ = new_project(merchant)
    path = write_project(
        tmp_path, company, project, {"A": ("Shoe", "10 EUR", GOOD_GTIN), "B": ("Hat", "5 EUR", GOOD_GTIN)}
    )
    merchant.refuse_offer("B", "[price] Invalid price currency")
    first = run(path)
    assert counts(synced(first)) == (1, 0, 0, 1, 0)
    assert [(e["key"], "Invalid price currency" in e["message"]) for e in synced(first)["errors"]] == [("B", True)]
    assert any(w.startswith("sync_failed: export 'google'") for w in first["warnings"])

    write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR", GOOD_GTIN)})
    second = run(path)
    assert counts(synced(second)) == (0, 0, 1, 0, 0), synced(second)
    deletes = [r for r in merchant.requests if r.method == "DELETE"]
    assert [(r.offer_id, r.status) for r in deletes] == [("B", 404)]  # not held: ok, the delete stuck
    assert set(merchant.products()) == {"A"}


def test_repair_sends_what_changed_behind_firefeeds_back_and_deletes_orphans_only_when_asked(
    merchant: MerchantStandIn, tmp_path: Path
) -> None:
    company, project, _ = new_project(merchant)
    rows = {k: (f"Item {k}", "10 EUR", GOOD_GTIN) for k in ("A", "B", "C")}
    path = write_project(tmp_path, company, project, rows)
    run(path)
    merchant.edit_product("A", title="Changed in Merchant Center")
    merchant.drop_product("B")
    orphan = json.loads(json.dumps(merchant.products()["C"]))
    orphan["offerId"] = "Z"
    merchant.add_product("1234567", "accounts/1234567/dataSources/7654321", orphan)
    merchant.requests.clear()

    code, out = cli("sync", "repair", project, "google", "--json")
    doc = json.loads(out)
    assert code == 0, doc
    assert (doc["missing"], doc["different"], doc["resent"], doc["orphans"]) == (1, 1, 2, 1), doc
    assert doc["orphan_keys"] == ["Z"] and not doc["orphans_deleted"]
    held = merchant.products()
    assert held["A"]["productAttributes"]["title"] == "Item A" and "B" in held and "Z" in held
    sent = sorted(r.offer_id for r in merchant.requests if r.method == "POST" and r.offer_id)
    assert sent == ["A", "B"]  # C was the same: not sent again

    code, out = cli("sync", "repair", project, "google", "--delete-orphans", "--json")
    doc = json.loads(out)
    assert (doc["orphans"], doc["orphans_deleted"], doc["sync"]["deleted"]) == (1, True, 1), doc
    assert set(merchant.products()) == {"A", "B", "C"}


def test_credentials_refused_by_google_are_the_syncs_error_and_alert_without_the_secret(
    merchant: MerchantStandIn,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    engine: Any,
) -> None:
    monkeypatch.setenv("FIREFEED_ALERT_BATCH_WAIT_S", "0")  # one try at the alert, then the process goes on
    reset_settings()
    caplog.set_level(logging.DEBUG)
    sa = merchant.service_account_json()
    company, project = company_with(GSA=sa, ALERTS_KEY="k-" + uuid.uuid4().hex), "p_" + uuid.uuid4().hex[:10]
    alerts = [{"url": "https://127.0.0.1:9/hook", "on": ["sync_failed"], "secret": "ALERTS_KEY"}]
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR", GOOD_GTIN)}, alerts=alerts)
    merchant.refuse_credentials()
    report = run(path)  # SUCCEEDED: a sync never fails the run
    doc = synced(report)
    assert doc["error"] and doc["pending"] == 1, doc
    assert any(w.startswith("sync_failed: export 'google'") for w in report["warnings"])
    with engine.connect() as conn:
        events = conn.execute(
            text("SELECT event, export, body FROM alert_deliveries WHERE run_id = CAST(:r AS uuid)"),
            {"r": report["run_id"]},
        ).all()
    assert [(e.event, e.export) for e in events] == [("sync_failed", "google")]
    key = json.loads(sa)["private_key"].splitlines()[1]
    assert key not in json.dumps(report) and key not in caplog.text and key not in str(events[0].body)


def test_a_literal_credential_is_refused_at_apply_naming_its_key(merchant: MerchantStandIn, tmp_path: Path) -> None:
    company, project, _sa = new_project(merchant)
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR", GOOD_GTIN)}, credentials='{"type": "x"}')
    code, _ = cli("apply", str(path))
    assert code == 2
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR", GOOD_GTIN)}, credentials="${secret:NOPE}")
    code, _ = cli("apply", str(path))
    assert code == 2


def test_another_company_cannot_read_or_repair_a_projects_sync(
    merchant: MerchantStandIn, tmp_path: Path, base_url: str
) -> None:
    company, project, _ = new_project(merchant)
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR", GOOD_GTIN)})
    run(path)
    from firefeed.runs.tokens import TokenStore

    own = {"Authorization": f"Bearer {TokenStore().create(company)}"}
    _other, theirs = new_company()
    with httpx.Client(base_url=base_url, timeout=60) as http:
        r = http.get(f"/api/projects/{project}/exports/google/sync", headers=own)
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["to"], body["items"], body["pending"], body["failed"]) == ("google-merchant", 1, 0, 0)
        assert body["last_sync_at"] and body["errors"] == []
        assert http.get(f"/api/projects/{project}/exports/google/sync", headers=theirs).status_code == 404
        assert (
            http.post(f"/api/projects/{project}/exports/google/sync/repair", headers=theirs, json={}).status_code == 404
        )
        r = http.post(
            f"/api/projects/{project}/exports/google/sync/repair", headers=own, json={"delete_orphans": False}
        )
        assert r.status_code == 200 and r.json()["missing"] == 0, r.text


def test_a_run_the_drop_guard_blocks_sends_nothing_and_status_refresh_reads_google_again(
    merchant: MerchantStandIn, tmp_path: Path
) -> None:
    company, project, _ = new_project(merchant)
    rows = {k: (f"Item {k}", "10 EUR", GOOD_GTIN) for k in ("A", "B", "C", "D")}
    path = write_project(tmp_path, company, project, rows, max_drop=50)
    run(path)
    merchant.requests.clear()
    write_project(tmp_path, company, project, {"A": rows["A"]}, max_drop=50)  # 75% dropped: blocked
    _code, out = cli("run", str(path), "--json")
    assert json.loads(out)["status"] == "FAILED"
    assert merchant.requests == [] and set(merchant.products()) == {"A", "B", "C", "D"}

    merchant.set_issues(
        "B",
        [{"code": "image_too_small", "severity": "DISAPPROVED", "attribute": "image link", "description": "Too small"}],
    )
    code, out = cli("sync", "status", project, "google", "--json")
    (before,) = json.loads(out)
    assert code == 0 and before["channel_issues"]["codes"] == {}
    code, out = cli("sync", "status", project, "google", "--refresh", "--json")
    (after,) = json.loads(out)
    assert code == 0 and after["channel_issues"]["codes"] == {"image_too_small": 1}, after
    assert after["channel_issues"]["flagged_by_firefeed"] == 0  # FireFeed's checks did not see this one coming
    (sample,) = after["channel_issue_items"]
    assert sample["key"] == "B" and [i["code"] for i in sample["issues"]] == ["image_too_small"]
    assert [r.method for r in merchant.requests if r.offer_id] == []  # a refresh lists; it sends nothing


def test_an_unreadable_optional_attribute_is_left_out_the_item_goes_live_and_a_later_fix_is_sent(
    merchant: MerchantStandIn, tmp_path: Path
) -> None:
    """A weight without a unit keeps only itself off the channel: the item goes live, the report, the run's
    warnings and `sync status` name the item, the attribute and why; an unreadable price still keeps its item
    off; and the weight, once fixed, is sent (#51)."""
    company, project, _ = new_project(merchant)
    path = write_project(
        tmp_path,
        company,
        project,
        {"A": ("Shoe", "10 EUR", GOOD_GTIN), "B": ("Hat", "5 EUR", GOOD_GTIN), "C": ("Bag", "cheap", GOOD_GTIN)},
    )
    feed = tmp_path / f"{project}.csv"
    lines = feed.read_text(encoding="utf-8").splitlines()

    def weigh(weights: dict[str, str]) -> None:
        rows = [f"{lines[0]},shipping_weight"]
        rows += [f"{line},{weights.get(line.split(',')[0], '')}" for line in lines[1:]]
        feed.write_text("\n".join(rows) + "\n", encoding="utf-8")

    weigh({"A": "1.5", "B": "2 kg", "C": "1 kg"})
    first = run(path)
    sync = synced(first)
    assert counts(sync) == (2, 0, 0, 1, 0), sync
    assert [(e["key"], e["code"]) for e in sync["errors"]] == [("C", "not_sent")]  # a price is required
    assert sync["left_out"] == 1
    assert [(w["key"], w["attribute"]) for w in sync["warnings"]] == [("A", "shipping_weight")]
    assert "'1.5' is not a number and a unit" in sync["warnings"][0]["message"]
    assert (
        "sync_attributes_left_out: export 'google' to google-merchant: 1 items sent without an attribute "
        "FireFeed could not read (see its warnings)" in first["warnings"]
    )
    held = merchant.products()
    assert set(held) == {"A", "B"}
    assert "shippingWeight" not in held["A"]["productAttributes"]
    assert held["B"]["productAttributes"]["shippingWeight"] == {"value": 2.0, "unit": "kg"}

    code, out = cli("sync", "status", project, "--json")
    (status,) = json.loads(out)
    assert code == 0 and (status["items"], status["left_out"]) == (2, 1), status
    assert [(w["key"], w["attribute"]) for w in status["warnings"]] == [("A", "shipping_weight")]
    code, out = cli("sync", "status", project)
    assert code == 0 and "left out A shipping_weight: '1.5' is not a number and a unit" in out, out

    weigh({"A": "1.5 kg", "B": "2 kg", "C": "1 kg"})
    second = run(path)
    assert counts(synced(second)) == (0, 1, 0, 0, 0), synced(second)  # C, refused and unchanged, waits
    assert "left_out" not in synced(second)
    assert merchant.products()["A"]["productAttributes"]["shippingWeight"] == {"value": 1.5, "unit": "kg"}
    _code, out = cli("sync", "status", project, "--json")
    (status,) = json.loads(out)
    assert (status["left_out"], status["warnings"]) == (0, [])


def test_the_channel_id_is_the_exports_id_and_an_item_sent_under_its_key_moves_to_it(
    merchant: MerchantStandIn, tmp_path: Path
) -> None:
    """The export's `id` may be written from another field than the project's key: the API sends that id, as the
    file says (a feed fetched into the same data source names the same product), deletes use the id sent, and an
    item the channel holds under its key (a ledger from before, or a spec that changed `id`) moves to its id
    with nothing left behind; status's issues and repair follow the channel's ids (#51)."""
    company, project, _ = new_project(merchant)
    path = write_project(tmp_path, company, project, {k: (f"Item {k}", "10 EUR", GOOD_GTIN) for k in ("A", "B", "C")})
    feed = tmp_path / f"{project}.csv"
    lines = feed.read_text(encoding="utf-8").splitlines()
    feed.write_text(
        "\n".join([f"{lines[0]},ref"] + [f"{line},REF-{line.split(',')[0]}" for line in lines[1:]]) + "\n",
        encoding="utf-8",
    )
    first = run(path)  # the export's id is the key: the products are A, B, C
    assert counts(synced(first)) == (3, 0, 0, 0, 0)
    assert set(merchant.products()) == {"A", "B", "C"}
    # the ledger as a sync before channel ids (and left-out attributes) made it
    from firefeed.db.engine import get_engine
    from firefeed.schema.identifiers import company_schema, sync_ledger_table

    ledger = f'"{company_schema(company)}"."{sync_ledger_table(project, "google")}"'
    with get_engine().begin() as conn:
        conn.execute(text(f"ALTER TABLE {ledger} DROP COLUMN cid, DROP COLUMN left_out"))

    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    spec["exports"][0]["fields"] = {
        "id": "ref",
        **{c: c for c in ("title", "description", "availability", "condition", "price", "gtin", "link", "image_link")},
        "brand": "brand",
    }
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    merchant.requests.clear()
    second = run(path)
    sync = synced(second)
    assert (sync["updated"], sync["deleted"], sync["failed"], sync["pending"]) == (3, 3, 0, 0), sync
    assert set(merchant.products()) == {"REF-A", "REF-B", "REF-C"}  # one product per item, as the file says
    posts = sorted(r.offer_id for r in merchant.requests if r.method == "POST" and r.offer_id)
    assert posts == ["REF-A", "REF-B", "REF-C"]

    merchant.requests.clear()
    third = run(path)  # nothing changed: nothing sent
    assert counts(synced(third)) == (0, 0, 0, 0, 0), synced(third)
    assert [r for r in merchant.requests if r.method in ("POST", "DELETE")] == []

    merchant.set_issues("REF-B", [{"code": "image_too_small", "severity": "DEMOTED", "attribute": "image link"}])
    code, out = cli("sync", "status", project, "--refresh", "--json")
    (status,) = json.loads(out)
    assert code == 0 and status["items"] == 3 and status["channel_issues"]["codes"].get("image_too_small") == 1
    assert [i["key"] for i in status["channel_issue_items"]] == ["B"]

    code, out = cli("sync", "repair", project, "google", "--delete-orphans", "--json")
    doc = json.loads(out)
    assert code == 0 and (doc["missing"], doc["different"], doc["orphans"]) == (0, 0, 0), doc
    assert set(merchant.products()) == {"REF-A", "REF-B", "REF-C"}

    lines = feed.read_text(encoding="utf-8").splitlines()
    feed.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")  # C leaves the export
    fourth = run(path)
    assert counts(synced(fourth)) == (0, 0, 1, 0, 0), synced(fourth)
    assert set(merchant.products()) == {"REF-A", "REF-B"}

    # B's export id becomes A's (a duplicate id, as the file has it: one product); B then leaves the export:
    # REF-A, which A still uses, is not deleted
    lines = feed.read_text(encoding="utf-8").splitlines()
    feed.write_text("\n".join([*lines[:2], lines[2].replace("REF-B", "REF-A")]) + "\n", encoding="utf-8")
    fifth = run(path)
    assert (synced(fifth)["deleted"], set(merchant.products())) == (1, {"REF-A"}), synced(fifth)
    feed.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    sixth = run(path)
    assert counts(synced(sixth)) == (0, 0, 0, 0, 0), synced(sixth)
    assert set(merchant.products()) == {"REF-A"}
