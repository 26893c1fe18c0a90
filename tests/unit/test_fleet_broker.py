"""The fleet's embedded broker: kombu's SQL transport on the database, its tables in their own schema."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from firefeed.commands._dbbroker import BROKER_SCHEMA, broker_url_on
from firefeed.config import Settings


def _options(url: str) -> list[str]:
    return parse_qs(urlsplit(url).query)["options"]


def test_the_broker_url_is_the_database_url_behind_sqla_with_the_broker_schema_first_on_the_path() -> None:
    url = broker_url_on("postgresql+psycopg2://ff:s3cret@db.local:6543/firefeed")
    assert url.startswith("sqla+postgresql+psycopg2://ff:s3cret@db.local:6543/firefeed?")
    assert _options(url) == [f"-csearch_path={BROKER_SCHEMA}"]


def test_the_embedded_databases_socket_and_existing_options_are_kept() -> None:
    url = broker_url_on("postgresql+psycopg2://postgres@/firefeed?host=/tmp/pg&options=-cstatement_timeout%3D5000")
    query = parse_qs(urlsplit(url).query)
    assert query["host"] == ["/tmp/pg"]
    assert query["options"] == [f"-cstatement_timeout=5000 -csearch_path={BROKER_SCHEMA}"]


def test_a_broker_on_the_database_keeps_results_beside_it_and_passes_no_redis_options() -> None:
    broker = broker_url_on("postgresql+psycopg2://postgres@127.0.0.1:5432/ff")
    settings = Settings(broker_url=broker, result_backend=None)
    assert settings.celery_result_backend == "db+" + broker.removeprefix("sqla+")
    # kombu's SQL transport hands every option to create_engine, which refuses visibility_timeout.
    assert settings.celery_broker_transport_options == {"pool_pre_ping": True}


def test_redis_keeps_its_visibility_timeout_longer_than_any_job() -> None:
    settings = Settings(broker_url="redis://127.0.0.1:6379/0", step_time_limit_s=100)
    assert settings.celery_broker_transport_options == {"visibility_timeout": 800}
