"""The one settings object: every FIREFEED_* variable, read once from the environment and `.env`.

The four concurrency variables are not here on purpose: `firefeed/concurrency.py`
is the single place that reads them (SPEC section 1).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from firefeed.errors import ConfigError

# kombu's SQLAlchemy transport: the broker on a database (see firefeed/commands/_dbbroker.py).
SQL_BROKER_PREFIX = "sqla+"


def normalize_database_url(url: str) -> str:
    """Accept the URL spellings users have and always drive Postgres through psycopg2.

    SQLAlchemy 2.1 maps a bare `postgresql://` to psycopg 3, which FireFeed does not ship.
    """
    for prefix in ("postgresql+psycopg2://", "postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg2://" + url[len(prefix) :]
    raise ConfigError(f"FIREFEED_DATABASE_URL must be a postgresql:// URL, got {url.split(':')[0]}://…")


def default_data_dir() -> Path:
    """One absolute data folder per installation, whatever folder a process starts in.

    The defaults were `var` and `exports` relative to each process's working folder, so a CLI run and
    the fleet, started in two folders, published one project's feed to two places. A source checkout
    (what `make demo` and the tests run) keeps its own `var/` beside the code, so two clones never
    share one; an installed package uses /var/lib/firefeed as root, else $XDG_DATA_HOME/firefeed.
    """
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "firefeed" / "config.py").is_file():
        return checkout / "var"
    if os.geteuid() == 0:
        return Path("/var/lib/firefeed")
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "firefeed"


class Settings(BaseSettings):
    """FireFeed's configuration; see `.env.example` for every variable and its default."""

    model_config = SettingsConfigDict(
        env_prefix="FIREFEED_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    database_url: str | None = None
    broker_url: str | None = None
    result_backend: str | None = None
    # Unset: <data_dir>/exports, the same absolute folder for every process of the installation.
    export_dir: Path = Path("exports")
    data_dir: Path = Field(default_factory=default_data_dir)
    # Where exports and a run's downloads live (firefeed/storage): unset = export_dir and data_dir/runs.
    storage_url: str | None = None
    storage_endpoint_url: str | None = None
    # A local export of this many bytes or more that a publish replaces is kept as `.<name>.spare` and written
    # over by the export's next file (#52, storage/spares.py): one more copy on disk for less time writing;
    # 0 keeps none.
    export_spare_min_bytes: int = Field(default=64 * 1024**2, ge=0)
    chunk_rows: int = Field(default=2000, ge=1)
    # The longest value PARSE takes from any feed format, in characters (parse/_base.py): a row holding a
    # longer one is malformed and skipped. 2^28: four bytes a character still fits a Postgres text (1 GB).
    parse_max_value_chars: int = Field(default=131_072, ge=1, le=1 << 28)
    # A csv/tsv source file of more bytes than this is kept, as PARSE read it, in <data_dir>/parsed/, so the
    # next parse of a changed file stages only the records that changed (#52, pipeline/stage_patch.py);
    # 0 keeps none. Below it a full parse costs less than the copy.
    parse_keep_copy_min_bytes: int = Field(default=16 * 1024**2, ge=0)
    # A fanned-out run's items are cut into at most this many parts, one chunk job per part and rule pass
    # (each of at least chunk_rows items); at most 99 (a part's number is in its pass table's name).
    rules_max_slices: int = Field(default=16, ge=1, le=99)
    web_pool_size: int = Field(default=5, ge=1)
    worker_type: str = "etl"
    workspace_id: str | None = None
    process_timeout_s: float = Field(default=3600.0, gt=0)
    process_lease_s: float = Field(default=30.0, ge=0.1)
    process_max_attempts: int = Field(default=2, ge=1)
    process_concurrency: int = Field(default=4, ge=1)
    process_poll_s: float = Field(default=2.0, ge=0.01)
    process_grace_s: float = Field(default=30.0, ge=0)
    # FETCH
    fetch_timeout_s: float = Field(default=30.0, gt=0)
    fetch_retries: int = Field(default=3, ge=0)
    fetch_backoff_s: float = Field(default=0.5, ge=0)
    fetch_max_bytes: int = Field(default=5 * 1024**3, ge=1)
    # A decompressed source has its own cap, and may not grow past this many times its compressed size
    # once it is larger than fetch_expansion_floor_bytes (a small gzip of a small feed is always fine).
    fetch_max_decompressed_bytes: int = Field(default=10 * 1024**3, ge=1)
    fetch_max_expansion_ratio: float = Field(default=100.0, gt=1)
    fetch_expansion_floor_bytes: int = Field(default=64 * 1024**2, ge=0)
    fetch_allow_private: bool = False
    fetch_allowed_hosts: str = ""
    local_sources_root: Path | None = None
    # Secrets (issue #15): the operator's key that encrypts per-company secrets at rest, and which
    # environment variables a spec applied through the CLI may name as ${VAR} (comma list; NAME* a prefix).
    secrets_key: str | None = None
    spec_env_allow: str = ""
    # What one company may store (#47): the secrets it holds; a spec's size in bytes at every entry point
    # (API, processes table, CLI file); its stored spec versions at any moment (runs/spec_versions.py), by
    # count and by bytes, the versions its runs and projects need included.
    secrets_per_company: int = Field(default=100, ge=1)
    spec_max_bytes: int = Field(default=1024**2, ge=1024)
    spec_versions_max: int = Field(default=500, ge=2)
    spec_versions_max_bytes: int = Field(default=128 * 1024**2, ge=1024)
    # How long an API process trusts a token it verified before asking the database again: a token revoked
    # elsewhere (the CLI, another API process) is refused everywhere within it (runs/tokens.py).
    token_cache_s: float = Field(default=5.0, ge=0)
    # The active (neither revoked nor expired) API tokens one company may hold: creating one more, over the API
    # or the CLI, is refused (409 company_limit) so a leaked token cannot mint tokens without end.
    tokens_per_company: int = Field(default=50, ge=1)
    # Feed URLs (SPEC 10 C4): the base that makes them absolute (unset: printed as paths), and how often an
    # API process checks whether feed ids or published files changed (a rotated id is served at most this long
    # by other processes; the one that rotated it forgets it at once).
    public_url: str | None = None
    feed_refresh_s: float = Field(default=1.0, gt=0, le=60)
    # Tenant bounds: every data-plane statement's timeout; a rules plan's largest compiled SQL.
    statement_timeout_s: float = Field(default=1800.0, gt=0)
    rules_max_sql_bytes: int = Field(default=4 * 1024**2, ge=1024)
    # how many times as long as the values they read the rules may make one (rules/value_growth.py)
    rules_max_growth: float = Field(default=64.0, ge=1)
    # What a spec may hold (spec/limits.py): sources, lookups, exports, rules, and fields (those one export
    # names in `fields`, and those the rules write): each a job, a table, a file or a column of every item.
    spec_max_sources: int = Field(default=32, ge=1)
    spec_max_lookups: int = Field(default=32, ge=0)
    spec_max_exports: int = Field(default=64, ge=1)
    spec_max_rules: int = Field(default=1000, ge=1)
    spec_max_fields: int = Field(default=1000, ge=1)
    # What EXPORT may write (export/bounds.py): per export, counted before gzip, on average per item it could
    # hold (plus 1 MiB for the format's head and tail) and in all; a run's files together, as stored; and
    # the free space the folder written to must keep besides the export's previous size.
    export_max_item_bytes: int = Field(default=64 * 1024, ge=1024)
    export_max_bytes: int = Field(default=64 * 1024**3, ge=1024**2)
    run_max_export_bytes: int = Field(default=256 * 1024**3, ge=1024**2)
    export_min_free_bytes: int = Field(default=1024**3, ge=0)
    # Previews: a total deadline each, their own worker pool, and how many one company runs at once.
    preview_deadline_s: float = Field(default=20.0, gt=0)
    preview_pool_size: int = Field(default=8, ge=1)
    preview_per_company: int = Field(default=2, ge=1)
    # Values calls (GET /api/projects/{id}/values, `firefeed values`): bounded as previews are (issue #47).
    values_deadline_s: float = Field(default=30.0, gt=0)
    values_pool_size: int = Field(default=4, ge=1)
    values_per_company: int = Field(default=2, ge=1)
    # A preview's answer in bytes of JSON: items past it are cut, and the answer says so (preview/budget.py).
    preview_max_answer_bytes: int = Field(default=16 * 1024**2, ge=64 * 1024)
    # runs
    step_time_limit_s: int = Field(default=3600, ge=1)
    heartbeat_s: float = Field(default=10.0, gt=0)
    stale_run_s: float = Field(default=300.0, gt=0)
    job_pickup_timeout_s: float = Field(default=600.0, gt=0)
    run_retention_days: int = Field(default=30, ge=1)
    # Tests only: publishing waits at each of its moments while `<dir>/<moment>.hold` exists (pipeline/publishing.py).
    test_publish_pause_dir: Path | None = None
    log_json: bool = False
    log_level: str = "INFO"
    flower_user: str = "admin"
    flower_password: str | None = None
    # operations (issue #5): beat, maintenance, metrics, Flower
    schedule_tick_s: float = Field(default=30.0, gt=0)
    maintenance_interval_s: float = Field(default=60.0, gt=0)
    prune_interval_s: float = Field(default=3600.0, gt=0)
    metrics_address: str = "127.0.0.1"
    worker_metrics_port: int = Field(default=9810, ge=0, le=65535)
    metrics_dir: Path | None = None
    flower_address: str = "127.0.0.1"
    flower_port: int = Field(default=5555, ge=1, le=65535)
    # alerts (SPEC 10 C8, #50, firefeed/alerts): how long an alert is retried, each attempt's timeout, the backoff
    # (first delay, doubled per attempt up to the max), and how long a batch process keeps sending after its run
    alert_retry_for_s: float = Field(default=3600.0, gt=0)
    alert_timeout_s: float = Field(default=10.0, gt=0)
    alert_backoff_s: float = Field(default=10.0, gt=0)
    alert_backoff_max_s: float = Field(default=600.0, gt=0)
    alert_batch_wait_s: float = Field(default=30.0, ge=0)
    # channel API sync (SPEC 10 C9-C10, #51, firefeed/sync): the channels' base URLs (tests point them at local
    # stand-ins; the fetcher's host rules apply to any other than these defaults), Google's request budget per
    # minute (the account's Merchant API quota; the sender keeps 3% under it), the threads sending Google's
    # one-product requests, how long one sync may send before it leaves the rest pending, how often a sync
    # reads the channel's item statuses, after how many days an unchanged item is sent again (Google expires a
    # product 30 days after its last update), and how often one item is tried on a transient failure.
    google_merchant_url: str = "https://merchantapi.googleapis.com"
    meta_graph_url: str = "https://graph.facebook.com"
    google_merchant_requests_per_minute: int = Field(default=3000, ge=1)
    sync_threads: int = Field(default=8, ge=1, le=64)
    sync_max_s: float = Field(default=900.0, gt=0)
    sync_status_every_s: float = Field(default=3600.0, ge=0)
    sync_resend_days: float = Field(default=25.0, gt=0, le=29)
    sync_max_attempts: int = Field(default=5, ge=1)
    # An API repair or `status?refresh=true` lists the channel (minutes at its pace): on threads of their own,
    # this many at once, this many per company (429/503 past them: api/routes/sync.py).
    sync_api_pool_size: int = Field(default=4, ge=1)
    sync_api_per_company: int = Field(default=1, ge=1)

    @field_validator(
        "database_url",
        "broker_url",
        "result_backend",
        "storage_url",
        "storage_endpoint_url",
        "flower_password",
        "secrets_key",
        "test_publish_pause_dir",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("storage_url")
    @classmethod
    def _storage_url(cls, value: str | None) -> str | None:
        from firefeed.storage import parse_storage_url

        if value is not None:
            parse_storage_url(value)  # a bad value stops the process at start, naming the variable
        return value

    @model_validator(mode="after")
    def _exports_under_the_data_folder(self) -> Settings:
        if "export_dir" not in self.model_fields_set:
            self.export_dir = self.data_dir / "exports"
        return self

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url is None:
            from firefeed.db.embedded import embedded_database_url

            return embedded_database_url(self.data_dir)
        return normalize_database_url(self.database_url)

    @property
    def celery_broker_url(self) -> str:
        """The broker; without one, an in-memory broker that only serves in-process workers.

        `firefeed fleet` with none configured gives its children one on the database
        (FIREFEED_BROKER_URL=sqla+postgresql+psycopg2://…, firefeed/commands/_dbbroker.py).
        """
        return self.broker_url or "memory://"

    @property
    def celery_result_backend(self) -> str:
        if self.result_backend:
            return self.result_backend
        broker = self.broker_url or ""
        if broker.startswith(("redis://", "rediss://")):
            return broker
        if broker.startswith(SQL_BROKER_PREFIX):
            # A broker on the database (`firefeed fleet` without a broker): results beside it.
            return "db+" + broker[len(SQL_BROKER_PREFIX) :]
        if broker.startswith(("amqp://", "pyamqp://")):
            return "rpc://"
        return "cache+memory://"

    @property
    def celery_broker_transport_options(self) -> dict[str, object]:
        """Transport options for the broker's kind (kombu's SQL transport passes them all to create_engine)."""
        if (self.broker_url or "").startswith(SQL_BROKER_PREFIX):
            return {"pool_pre_ping": True}
        # Redis re-delivers an unacked message after the visibility timeout: keep it longer than any
        # job can run, so a live job is never handed to a second worker.
        return {"visibility_timeout": self.step_time_limit_s * 2 + 600}

    @property
    def allowed_hosts(self) -> set[str]:
        return {h.strip().lower() for h in self.fetch_allowed_hosts.split(",") if h.strip()}


def _describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        name = "FIREFEED_" + "_".join(str(p) for p in e["loc"]).upper()
        parts.append(f"{name}: {e['msg']}")
    return "; ".join(parts)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Load the settings once per process; a bad value stops with the variable's name."""
    try:
        return Settings()
    except ValidationError as err:
        raise ConfigError(_describe(err)) from err


def reset_settings() -> None:
    """Forget the cached settings (tests change the environment between cases)."""
    get_settings.cache_clear()
