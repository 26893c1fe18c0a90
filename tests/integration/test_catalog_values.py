"""SPEC 9, P33: `firefeed values PROJECT FIELD` and GET /api/projects/{id}/values after the project's rules."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.integration.conftest import cli, new_company, run_json, write_csv

pytestmark = pytest.mark.integration


def _project(tmp: Path, company: str, project: str) -> Path:
    write_csv(
        tmp / "main.csv",
        ["id", "cat", "title"],
        [
            ["1", "Hats", "a"],
            ["2", "Bags", "b"],
            ["3", "Hats", "c"],
            ["4", "", "d"],
            ["5", "Rings", "e"],
            ["6", "Bags", "f"],
        ],
    )
    write_csv(tmp / "cats.csv", ["code", "gpc"], [["Rings", "Jewelry"]])
    spec: dict[str, Any] = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "lookups": [{"name": "cats", "url": "cats.csv", "key": "code"}],
        "rules": [
            {"name": "drop f", "when": {"field": "title", "op": "eq", "value": "f"}, "then": [{"exclude": True}]},
            {"name": "gpc", "then": [{"lookup": "cats", "match": "cat", "set": {"cat": "gpc"}}]},
        ],
        "exports": [{"name": "e", "format": "csv", "path": "e.csv"}],
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def test_values_lists_a_fields_values_after_the_rules_most_frequent_first(run_env: Path, tmp_path: Path) -> None:
    project = "values_" + uuid.uuid4().hex[:8]
    spec = _project(tmp_path, "catalog", project)
    code, out = cli("values", project, "cat")
    assert code == 4  # no run yet
    code, report = run_json(spec)
    assert code == 0, report
    code, out = cli("values", project, "cat", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["run_id"] == report["run_id"] and doc["items"] == 5
    # "Bags" lost its excluded item (a tie with "" and "Jewelry": feed order); the lookup's "Jewelry" counts
    assert doc["values"] == [
        {"value": "Hats", "count": 2},
        {"value": "Bags", "count": 1},
        {"value": "", "count": 1},
        {"value": "Jewelry", "count": 1},
    ]
    code, out = cli("values", project, "cat")
    assert code == 0 and "(empty)" in out and "Hats" in out
    assert cli("values", project, "nope")[0] == 2


def test_the_api_lists_the_same_values_for_the_tokens_company_only(
    run_env: Path, tmp_path: Path, http: httpx.Client
) -> None:
    company, auth = new_company()
    project = "values_" + uuid.uuid4().hex[:8]
    code, report = run_json(_project(tmp_path, company, project))
    assert code == 0, report
    r = http.get(f"/api/projects/{project}/values", params={"field": "cat"}, headers=auth)
    assert r.status_code == 200, r.text
    assert [v["value"] for v in r.json()["values"]] == ["Hats", "Bags", "", "Jewelry"]
    r = http.get(f"/api/projects/{project}/values", params={"field": "nope"}, headers=auth)
    assert r.status_code == 422
    _, other = new_company()
    assert http.get(f"/api/projects/{project}/values", params={"field": "cat"}, headers=other).status_code == 404


def test_values_of_a_field_named_like_the_count(run_env: Path, tmp_path: Path) -> None:
    project = "values_" + uuid.uuid4().hex[:8]
    write_csv(tmp_path / "main.csv", ["id", "n", "tags"], [["1", "a", "x"], ["2", "a", "x"], ["3", "b", "y"]])
    spec = {
        "company": "catalog",
        "project": project,
        "sources": [{"name": "main", "url": "main.csv", "lists": {"tags": ","}}],
        "exports": [{"name": "e", "format": "csv", "path": "e.csv"}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    code, report = run_json(path)
    assert code == 0, report
    for field, values in [("n", [["a", 2], ["b", 1]]), ("tags", [["x", 2], ["y", 1]])]:
        code, out = cli("values", project, field, "--json")
        assert code == 0, out
        assert [[v["value"], v["count"]] for v in json.loads(out)["values"]] == values
