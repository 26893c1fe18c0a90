"""The typed job contract: each kind's params and result survive their JSON, in the shape the rows always had."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from firefeed.runs.contract import (
    ChunkResult,
    ExportParams,
    ExportResult,
    JobKind,
    JobSpec,
    JobStatus,
    MergeParams,
    MergeResult,
    ParsedSource,
    RulesChunkParams,
    RulesParams,
    RulesResult,
    RunStatus,
    SourceFetched,
    SourceResult,
    SourceSkips,
    Step,
)

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _through_json(doc: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = json.loads(json.dumps(doc))
    return out


@pytest.mark.parametrize(
    "value",
    [
        MergeParams([ParsedSource("main", "staging_p_main", ["id", "title"], 40)]),
        RulesParams(["id", "title"], 40),
        RulesChunkParams(["id"], "items_p", 10, number=101, lo=None, hi=10),
        RulesChunkParams(["id"], "rules_tmp_x_101", 9, number=201, groups="rules_tmp_x_2_g"),
        RulesChunkParams(["id"], "items_p", 10, dst="rules_tmp_x_1", lo=None, hi=10),
        RulesChunkParams(["id"], "rules_tmp_x_1", 35, in_place=True),
        ExportParams("rules_tmp_x_2", ["id", "title"]),
        ExportParams("rules_tmp_x_2", ["id", "title"], 35),
        SourceResult(
            fetch={"name": "main", "bytes": 10, "not_modified": False},
            parse={"name": "main", "rows": 40, "fields": 2},
            parsed=ParsedSource("main", "staging_p_main", ["id", "title"], 40),
            warnings=["line 3: odd quote"],
            fetch_started=AT,
            fetch_finished=AT,
            parse_finished=AT,
        ),
        MergeResult(["id", "title"], 38, 40, {"main": SourceSkips(1, 1), "extra": SourceSkips(0, 0)}),
        RulesResult("rules_tmp_x_2", ["id", "title"], 2, {"vat": 38, "drop": 3}, 3, 38, 35),
        ChunkResult("rules_tmp_x_101", 10, 9, {"drop": 1}),
        ExportResult({"name": "csv", "path": "acme/p/out.csv", "rows": 35, "bytes": 900, "sha256": "ab"}),
    ],
    ids=lambda v: type(v).__name__,
)
def test_every_params_and_result_survives_its_json(value: object) -> None:
    doc = value.to_json()  # type: ignore[attr-defined]
    assert type(value).from_json(_through_json(doc)) == value  # type: ignore[attr-defined]


def test_the_json_keeps_the_keys_workers_of_the_previous_version_read() -> None:
    """A driver and a worker on another machine may be one release apart during a deploy."""
    assert RulesChunkParams(["id"], "a", 10, number=102, lo=1, hi=10).to_json() == {
        "fields": ["id"],
        "src": "a",
        "number": 102,
        "lo": 1,
        "hi": 10,
        "rows": 10,
    }
    # What the previous release's driver sends (a table to INSERT into) is still read, and written back the same.
    assert RulesChunkParams(["id"], "a", 10, dst="b", lo=1, hi=10).to_json() == {
        "fields": ["id"],
        "src": "a",
        "dst": "b",
        "lo": 1,
        "hi": 10,
        "rows": 10,
    }
    assert RulesChunkParams(["id"], "a", 10, in_place=True).to_json() == {
        "fields": ["id"],
        "src": "a",
        "in_place": True,
        "rows": 10,
    }
    # JSONB reorders object keys: the rules' matches stay pairs, in the rules' order.
    rules = RulesResult("t", ["id"], 1, {"z last": 1, "a first": 2}, 0, 3, 3).to_json()
    assert rules["matched"] == [["z last", 1], ["a first", 2]]
    assert list(RulesResult.from_json(_through_json(rules)).matched) == ["z last", "a first"]
    fetched = SourceFetched({"name": "main"}, AT, AT, {"name": "main"}).to_json()
    assert SourceFetched.present(fetched) and not SourceFetched.present({}) and not SourceFetched.present(None)
    assert SourceResult.fetched_part(fetched) == ({"name": "main"}, AT, AT)


def test_kinds_and_statuses_are_the_strings_the_database_holds() -> None:
    assert [k.value for k in JobKind] == ["source", "merge", "rules", "rules_chunk", "export", "deliver", "sync"]
    assert [s.value for s in JobStatus] == ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
    assert [s.value for s in RunStatus] == ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
    assert [s.value for s in Step] == ["FETCH", "PARSE", "MERGE", "RULES", "EXPORT"]
    assert JobStatus("FAILED") is JobStatus.FAILED and JobStatus.FAILED == "FAILED"
    assert JobSpec(JobKind.SOURCE).step is Step.PARSE  # a source job is recorded under PARSE
    assert JobSpec(JobKind.RULES_CHUNK).step is Step.RULES
    assert JobSpec(JobKind.DELIVER).step is Step.EXPORT  # a delivery is on EXPORT's line, after the publish
    assert JobSpec(JobKind.SYNC).step is Step.EXPORT  # a sync too, after the deliveries (SPEC 10 C10)
