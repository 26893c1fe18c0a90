import pytest

from firefeed.concurrency import DEFAULTS, load_concurrency
from firefeed.errors import ConfigError


def test_defaults_apply_when_nothing_is_set() -> None:
    c = load_concurrency({})
    assert (c.pipeline, c.import_, c.rules, c.export) == (
        DEFAULTS["PIPELINE_CONCURRENCY"],
        DEFAULTS["IMPORT_CONCURRENCY"],
        DEFAULTS["RULES_CONCURRENCY"],
        DEFAULTS["EXPORT_CONCURRENCY"],
    )
    assert c.pipeline == 1


def test_values_are_read_per_queue() -> None:
    c = load_concurrency({"PIPELINE_CONCURRENCY": "3", "RULES_CONCURRENCY": "4"})
    assert c.for_queue("pipeline") == 3
    assert c.for_queue("rules") == 4


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "1.5"])
@pytest.mark.parametrize("name", list(DEFAULTS))
def test_a_bad_value_stops_with_the_variable_named(name: str, bad: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load_concurrency({name: bad})


def test_the_connection_budget_is_pipeline_times_steps_plus_web_pool() -> None:
    c = load_concurrency(
        {"PIPELINE_CONCURRENCY": "2", "IMPORT_CONCURRENCY": "3", "RULES_CONCURRENCY": "4", "EXPORT_CONCURRENCY": "5"}
    )
    assert c.connections_needed(web_pool=7) == 2 * (3 + 4 + 5 + 1) + 7  # SYNC_CONCURRENCY 1 by default
