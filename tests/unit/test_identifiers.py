import pytest

from firefeed.dataplane.names import rules_tmp_table, run_id_of_tmp_table
from firefeed.runs.lock import project_lock_key
from firefeed.schema.identifiers import (
    MAX_IDENT_BYTES,
    column_for_field,
    lookup_staging_table,
    lookup_table,
    project_table,
    published_keys_table,
    staging_table,
)


@pytest.mark.parametrize(
    ("project", "key"),
    [
        ("shoes_it", -5106024346557143263),
        ("p1", -701064020606552029),
        ("00000000-0000-0000-0000-000000000001", 8845554376707389133),
    ],
)
def test_the_lock_key_matches_the_spec_vectors(project: str, key: int) -> None:
    assert project_lock_key(project) == key


def test_short_field_names_are_their_own_columns() -> None:
    for name in ["id", "price", 'we"ird', "drop table x;--", "select", "prezzo €", "a b"]:
        assert column_for_field(name) == name


def test_long_names_map_to_stable_distinct_columns_within_the_limit() -> None:
    a, b = "x" * 200, "x" * 199 + "y"
    ca, cb = column_for_field(a), column_for_field(b)
    assert ca != cb
    assert ca == column_for_field(a)
    assert len(ca.encode()) <= MAX_IDENT_BYTES
    multibyte = "é" * 100
    assert len(column_for_field(multibyte).encode()) <= MAX_IDENT_BYTES


def test_names_that_look_internal_are_mapped_away_from_internal_columns() -> None:
    assert not column_for_field("_ff_ord").startswith("_ff_")
    assert column_for_field("_ff_ord") != "_ff_ord"


def test_table_names_fit_and_rules_tmp_names_lead_back_to_their_run() -> None:
    project = "P" * 64
    assert len(project_table(project).encode()) <= MAX_IDENT_BYTES
    assert len(staging_table(project, "s" * 300).encode()) <= MAX_IDENT_BYTES
    run_id = "12345678-1234-1234-1234-123456789abc"
    assert run_id_of_tmp_table(rules_tmp_table(run_id, 3)) == run_id
    assert run_id_of_tmp_table("rules_tmp_whatever") is None


@pytest.mark.parametrize("name", ["x", "categories", "feed"])
def test_no_two_projects_tables_share_a_name(name: str) -> None:
    # A project id may hold `_`: one project's prefix plus another's id must not meet its tables.
    projects = ["shop", "lkp_shop", "l_shop", "stg_shop", "keys_shop", "shop_x"]
    seen: dict[str, tuple[str, str]] = {}
    for project in projects:
        for kind, table in [
            ("items", project_table(project)),
            ("staging", staging_table(project, name)),
            ("lookup", lookup_table(project, name)),
            ("lookup staging", lookup_staging_table(project, name)),
            ("export keys", published_keys_table(project, name)),
        ]:
            assert seen.setdefault(table, (project, kind)) == (project, kind), table
