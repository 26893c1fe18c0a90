"""A run of a project whose export syncs to a Meta catalog, through the Graph stand-in over HTTP (SPEC 10
C9-C10, #51): the run's sync job sends the published items in one batch, Meta's refusal of one item is in
the report with Meta's own words, a removed item is deleted by the next run, `repair` puts back what was
changed on the catalog and deletes an orphan only when told, the status counts what Meta says is wrong
with a product, and the token shows nowhere."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.config import get_settings, reset_settings
from firefeed.db.engine import get_engine
from firefeed.secrets.crypto import generate_key
from firefeed.sync import service
from tests.integration.conftest import cli
from tests.integration.file_servers import company_with
from tests.standins.meta_graph import MetaGraphStandIn

pytestmark = pytest.mark.integration

TOKEN = "EAAB-meta-sync-token-" + uuid.uuid4().hex
CATALOG = "8080"
SHOP = "https://www.shoeshop-firenze.it/p"


@pytest.fixture()
def graph(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MetaGraphStandIn]:
    with MetaGraphStandIn(token=TOKEN, catalog=CATALOG, polls_in_progress=1) as standin:
        monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
        monkeypatch.setenv("FIREFEED_META_GRAPH_URL", standin.url)
        monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
        reset_settings()
        yield standin
        reset_settings()


def write_project(folder: Path, company: str, project: str, rows: dict[str, tuple[str, str]]) -> Path:
    feed = folder / f"{project}.csv"
    feed.write_text(
        "id,title,description,availability,condition,price,link,image_link,brand\n"
        + "".join(
            f'{k},{t},{t} of ours,in stock,new,"{p}",{SHOP}/{k},{SHOP}/{k}.jpg,Firenze\n' for k, (t, p) in rows.items()
        ),
        encoding="utf-8",
    )
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": str(feed), "format": "csv"}],
        "exports": [
            {
                "name": "m",
                "format": "csv",
                "path": "m.csv",
                "channel": "meta",
                "max_drop": 100,
                "sync": {"to": "meta-catalog", "catalog": CATALOG, "token": "${secret:META_TOKEN}"},
            }
        ],
    }
    path = folder / f"{project}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def run(path: Path) -> tuple[dict[str, Any], str]:
    _code, out = cli("run", str(path), "--json")
    report: dict[str, Any] = json.loads(out)
    assert report["status"] == "SUCCEEDED", report
    return report, out


def test_runs_sync_the_export_to_the_catalog_and_repair_undoes_changes_made_behind_its_back(
    graph: MetaGraphStandIn, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the CLI sets the root logger to WARNING; these loggers' own level lets their INFO lines reach caplog
    for name in ("firefeed", "httpx", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    company, project = company_with(META_TOKEN=TOKEN), "p_" + uuid.uuid4().hex[:10]
    graph.refuse("C", "The image at image_link could not be downloaded")
    rows = {"A": ("Shoe", "10 EUR"), "B": ("Hat", "5,5 EUR"), "C": ("Belt", "7 EUR")}
    path = write_project(tmp_path, company, project, rows)

    first, out = run(path)
    sync = first["exports"][0]["sync"]
    assert (sync["to"], sync["inserted"], sync["failed"], sync["pending"]) == ("meta-catalog", 2, 1, 0), sync
    assert sync["errors"] == [
        {"key": "C", "code": "invalid_item", "message": "The image at image_link could not be downloaded"}
    ]
    assert set(graph.items) == {"A", "B"} and graph.items["B"]["price"] == "5.50 EUR"
    assert len(graph.calls("items_batch")) == 1  # one batch for the export, polled until finished

    del rows["A"]
    rows["B"] = ("Hat", "6,5 EUR")
    second, out2 = run(write_project(tmp_path, company, project, rows))
    sync = second["exports"][0]["sync"]
    assert sync["deleted"] == 1 and sync["updated"] == 1, sync
    assert set(graph.items) == {"B"} and graph.items["B"]["price"] == "6.50 EUR"
    assert ("DELETE", "A") in list(graph.sent())

    # behind FireFeed's back: B's title changed, an orphan Z added; B's "6,5 EUR" reads back "€6.50": the same
    graph.edit("B", title="Hat (edited in Commerce Manager)")
    graph.put("Z", title="Orphan", price="1.00 EUR")
    kept = service.repair(project, "m", delete_orphans=False, settings=get_settings(), engine=get_engine())
    assert (kept["missing"], kept["different"], kept["orphans"], kept["orphan_keys"]) == (1, 1, 1, ["Z"]), kept
    assert graph.items["B"]["title"] == "Hat" and "Z" in graph.items  # C is still refused: missing again
    gone = service.repair(project, "m", delete_orphans=True, settings=get_settings(), engine=get_engine())
    assert gone["different"] == 0 and gone["orphans_deleted"] and "Z" not in graph.items, gone

    # "meta says": the product's errors from the products edge, counted by code in the status
    graph.set_errors("B", [{"title": "Image too small", "description": "500x500 at least", "error_type": "IMAGE_SIZE"}])
    (status,) = service.status(project, "m", settings=get_settings(), engine=get_engine(), refresh=True)
    assert status["channel_issues"]["codes"] == {"IMAGE_SIZE": 1}, status

    assert f"meta catalog {CATALOG}: batch" in caplog.text  # the sync's own log lines were captured
    for text in (out, out2, caplog.text):
        assert TOKEN not in text
    assert all(TOKEN not in r.path and TOKEN not in r.body.decode() for r in graph.requests)
