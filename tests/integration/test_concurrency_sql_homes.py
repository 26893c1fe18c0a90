"""The schema catalog queries have one home (firefeed/schema/queries.sql), and the fleet gauges reuse them."""

from __future__ import annotations

import re
import secrets
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import Engine

import firefeed
from firefeed import metrics
from firefeed.dataplane.names import rules_tmp_table
from firefeed.dataplane.run_tables import RunTables
from firefeed.db.sqlfile import load_queries
from firefeed.schema.identifiers import scratch_area
from firefeed.schema.service import SchemaService

pytestmark = pytest.mark.integration

PACKAGE = Path(firefeed.__file__).parent
# A statement reading the catalog: SELECT ... FROM pg_tables, information_schema, to_regclass(...).
CATALOG = re.compile(r"\b(SELECT|FROM|JOIN)\b.*\b(pg_tables|pg_namespace|pg_class|information_schema|to_regclass)\b")


def test_every_schema_query_is_a_named_block_the_service_uses() -> None:
    source = (PACKAGE / "schema" / "service.py").read_text(encoding="utf-8")
    used = set(re.findall(r'_sql\("([a-z_]+)"\)', source))
    assert used == set(load_queries("firefeed.schema"))
    for name, text in load_queries("firefeed.schema").items():
        assert "%s" not in text, f"{name}: parameters are named (%(name)s)"


def test_no_catalog_sql_is_left_in_the_service_or_the_metrics() -> None:
    # The data plane decides which run tables to list and drop; the catalog queries stay the SchemaService's.
    for path in (PACKAGE / "schema" / "service.py", PACKAGE / "metrics.py", *(PACKAGE / "dataplane").glob("*.py")):
        code = [line for line in path.read_text(encoding="utf-8").splitlines() if '"' in line or "'" in line]
        found = [line.strip() for line in code if CATALOG.search(line) and not line.strip().startswith("#")]
        assert found == [], f"{path.name}: {found}"


def test_the_fleet_gauge_counts_what_the_schema_service_lists(engine: Engine) -> None:
    schema = SchemaService(engine)
    company = "sqlhomes"
    schema.create_company_schema(company)
    run_id = str(uuid.uuid4())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.FleetCollector(engine, broker_url="", cache_s=0))

    def gauge() -> float:
        found = [
            v
            for n, _, v in metrics.iter_samples(generate_latest(registry).decode())
            if n == "firefeed_rules_tmp_tables"
        ]
        return found[0]

    before = RunTables(schema).count_rules_tmp()
    assert gauge() == before == len(RunTables(schema).list_rules_tmp())
    table = schema.create_rules_tmp(company, run_id, 1, ["title"])
    # Look-alikes that are not a company's pass table: `_` in the patterns is a literal underscore.
    decoy = "rulesxtmp_" + run_id.replace("-", "") + "_1"
    schema.create_staging_table(company, decoy, ["title"])
    area = scratch_area(int(time.time()), secrets.token_hex(8))
    schema.create_scratch_area(area)
    schema.create_rules_tmp(area, run_id, 1, ["title"])
    try:
        assert RunTables(schema).count_rules_tmp() == before + 1
        assert gauge() == before + 1
        assert (f"company_{company}", table) in RunTables(schema).list_rules_tmp()
        assert RunTables(schema).list_rules_tmp(company) == [(f"company_{company}", table)]
    finally:
        schema.drop_scratch_area(area)
        schema.drop_table(company, decoy)
        assert RunTables(schema).drop_rules_tmp_for_run(company, run_id) == 1
    assert RunTables(schema).count_rules_tmp() == before
    assert rules_tmp_table(run_id, 1) == table
