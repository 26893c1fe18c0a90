"""The control plane: companies, projects and their parts, runs and their step timeline.

Alembic owns these tables (firefeed/db/migrations); the per-company data tables
belong to the SchemaService.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSON, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

JsonType = JSONB()
# Spec documents (a project's spec, its stored versions, the source, rule and export definitions) are
# stored as `json`, which keeps the text and so the order of mapping keys: an export's `fields`,
# a `map`'s values and a source's `headers` come back in the order the spec lists them (SPEC 8.18).
# JSONB sorts object keys (by length, then bytes). Nothing queries inside these documents.
SpecJsonType = JSON()


class Base(DeclarativeBase):
    pass


class Company(Base):
    __tablename__ = "companies"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    company_id: Mapped[str] = mapped_column(ForeignKey("companies.id", ondelete="CASCADE"), index=True)
    name: Mapped[str | None] = mapped_column(Text)
    key_field: Mapped[str] = mapped_column(Text, server_default="id")
    schedule: Mapped[str | None] = mapped_column(Text)
    spec: Mapped[dict[str, Any]] = mapped_column(SpecJsonType)
    spec_dir: Mapped[str | None] = mapped_column(Text)
    # The stored version of `spec` + `spec_dir` a run requested now refers to (set by every apply).
    spec_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("spec_versions.id", name="fk_projects_spec_version_id", use_alter=True)
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_scheduled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # the cron slot beat handled


class Source(Base):
    __tablename__ = "sources"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(Text)
    position: Mapped[int] = mapped_column(Integer)
    url: Mapped[str] = mapped_column(Text)
    definition: Mapped[dict[str, Any]] = mapped_column(SpecJsonType)
    # What the last successful parse left in staging, so an unchanged source is not parsed again.
    etag: Mapped[str | None] = mapped_column(Text)
    last_modified: Mapped[str | None] = mapped_column(Text)
    content_sha256: Mapped[str | None] = mapped_column(Text)
    parse_signature: Mapped[str | None] = mapped_column(Text)
    staged_fields: Mapped[list[str] | None] = mapped_column(JsonType)
    staged_stats: Mapped[dict[str, Any] | None] = mapped_column(JsonType)


class Rule(Base):
    __tablename__ = "rules"
    __table_args__ = (UniqueConstraint("project_id", "position"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(Text)
    enabled: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    definition: Mapped[dict[str, Any]] = mapped_column(SpecJsonType)


class Export(Base):
    __tablename__ = "exports"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(Text)
    position: Mapped[int] = mapped_column(Integer)
    format: Mapped[str] = mapped_column(Text)
    path: Mapped[str] = mapped_column(Text)
    definition: Mapped[dict[str, Any]] = mapped_column(SpecJsonType)


class SpecVersion(Base):
    """A project's spec as one apply stored it, once: runs refer to it instead of copying the document.

    Content-addressed per project: `digest` is SHA-256 of the folder and the document's JSON text,
    so applying the same spec again reuses its version. Never changed; gone with its project, pruned
    with the run history once no run and no project refers to it (`prune_spec_versions`), or by the
    company's bound when an apply stores a new one (firefeed/runs/spec_versions.py).
    """

    __tablename__ = "spec_versions"
    __table_args__ = (UniqueConstraint("project_id", "digest", name="uq_spec_versions_project_digest"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(SpecJsonType)
    spec_dir: Mapped[str | None] = mapped_column(Text)
    # Bytes of the document's JSON text and its folder: what the company's bound sums (spec_versions.py).
    size_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class PipelineRun(Base):
    __tablename__ = "pipeline_runs"
    __table_args__ = (
        Index("ix_pipeline_runs_project_requested", "project_id", "requested_at"),
        # Second guard behind the advisory lock: at most one active run per project.
        Index(
            "uq_pipeline_runs_one_active",
            "project_id",
            unique=True,
            postgresql_where=text("status IN ('PENDING', 'RUNNING')"),
        ),
        Index("ix_pipeline_runs_status", "status"),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    company_id: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    trigger: Mapped[str] = mapped_column(String(16))
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    error: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    report: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    # The spec version current when the run was requested: every job of the run reads this one, so
    # a spec applied mid-run takes effect with the next run, never half-way through this one. NULL once the
    # company's bound deleted an old finished run's version: such a run reads its project's current spec.
    spec_version_id: Mapped[int | None] = mapped_column(ForeignKey("spec_versions.id", ondelete="SET NULL"), index=True)
    # A person confirmed that this run may publish exports that lose more items than their max_drop.
    accept_drop: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    accept_invalid: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    # `--full` / `{"full": true}`: recompute every item even when the inputs did not change (SPEC 11 I2).
    full: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    # The [partial key, published key] pairs of the exports the run switches into place, recorded before
    # the first switch: a run that has them publishes all of them, even after its driver died (#47).
    publishing: Mapped[list[list[str]] | None] = mapped_column(JsonType)


class PipelineStep(Base):
    __tablename__ = "pipeline_steps"
    __table_args__ = (UniqueConstraint("run_id", "step"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("pipeline_runs.id", ondelete="CASCADE"))
    step: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    rows_in: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    rows_out: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    detail: Mapped[dict[str, Any] | None] = mapped_column(JsonType)


class PipelineJob(Base):
    """One unit of step work (a source, the merge, a rules chunk, an export) of a run.

    Workers claim a job atomically before running it and record its result in
    the same transaction as its effect where they can, so a redelivered job
    finds it done and does nothing.
    """

    __tablename__ = "pipeline_jobs"
    __table_args__ = (
        UniqueConstraint("run_id", "kind", "pass_no", "idx"),
        Index("ix_pipeline_jobs_run_status", "run_id", "status"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("pipeline_runs.id", ondelete="CASCADE"))
    step: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(16))
    pass_no: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    idx: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    params: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    status: Mapped[str] = mapped_column(String(16), server_default=text("'PENDING'"))
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    claimed_by: Mapped[str | None] = mapped_column(Text)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    result: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    error: Mapped[dict[str, Any] | None] = mapped_column(JsonType)


class ApiToken(Base):
    """A bearer token of the HTTP API, bound to one company; only its SHA-256 is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    company_id: Mapped[str] = mapped_column(ForeignKey("companies.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The first characters of the token, so an operator can tell tokens apart without the secret.
    token_prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # NULL: never expires. Past it the token is refused (401), from the cache too.
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Set by `firefeed token revoke` or DELETE /api/tokens/{id}; the row stays so the list still shows it.
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # When a request last verified it against the database, to the minute (firefeed/runs/tokens.py).
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The token whose request created this one over the API (NULL: the operator's `firefeed token create`).
    # Revoking a token revokes every token below it; a child never expires after its parent.
    parent_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True
    )
    # A label the company gives it (at most 100 characters), shown as text.
    name: Mapped[str | None] = mapped_column(String(100))


class CompanySecret(Base):
    """A company's secret for `${secret:NAME}` in its specs, stored only encrypted (firefeed/secrets)."""

    __tablename__ = "company_secrets"

    company_id: Mapped[str] = mapped_column(ForeignKey("companies.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    # AES-GCM under FIREFEED_SECRETS_KEY, bound to company and name: `v1.` + base64(nonce + ciphertext).
    ciphertext: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class HostKey(Base):
    """The SSH host key an SFTP server of a company presented first, pinned for later fetches (SPEC 10 C6).

    Written by the first fetch from (company, host, port) when the spec gives no `host_key`;
    removed by `firefeed host-key forget` to accept a server's new key (firefeed/pipeline/transfer).
    """

    __tablename__ = "host_keys"

    company_id: Mapped[str] = mapped_column(ForeignKey("companies.id", ondelete="CASCADE"), primary_key=True)
    host: Mapped[str] = mapped_column(Text, primary_key=True)
    port: Mapped[int] = mapped_column(Integer, primary_key=True)
    # OpenSSH public key text, `<type> <base64>`, and its SHA256 fingerprint as ssh-keygen -l prints it.
    public_key: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class FeedUrl(Base):
    """An export's feed URL (SPEC 10 C4): its secret id and its last fetch (firefeed/feeds).

    Keyed by project and export name, not by the `exports` row, which every apply replaces: the URL a
    merchant gave a channel must survive re-applying the spec. `changed_at` moves with every new or
    rotated id, so API processes see the change in their cheap version check.
    """

    __tablename__ = "feed_urls"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    export_name: Mapped[str] = mapped_column(Text, primary_key=True)
    feed_id: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_fetch_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_fetch_user_agent: Mapped[str | None] = mapped_column(Text)
    last_fetch_status: Mapped[int | None] = mapped_column(Integer)


class DeliveredFile(Base):
    """What each delivery target of an export last received (SPEC 10 C7): a delivery of the same sha256 is
    `unchanged` and sends nothing (firefeed/deliveries). Keyed by project, export name and target URL."""

    __tablename__ = "delivered_files"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    export_name: Mapped[str] = mapped_column(Text, primary_key=True)
    target: Mapped[str] = mapped_column(Text, primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    bytes: Mapped[int] = mapped_column(BigInteger)
    run_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    delivered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class PublishedFile(Base):
    """A published export file's stat identity, kept with the sha256 it vouches for (#52): the check that
    the last succeeded run's files are still in place (dataplane/state.py `moved_files`) stats the file
    instead of reading it. Written by that check after a read proved the file unchanged (a file FireFeed
    just wrote is too fresh to be trusted by its stat: dataplane/file_identity.py)."""

    __tablename__ = "published_files"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    export_name: Mapped[str] = mapped_column(Text, primary_key=True)
    path: Mapped[str] = mapped_column(Text)  # the storage key the identity was taken of
    identity: Mapped[dict[str, Any]] = mapped_column(JSONB)  # FileIdentity.to_json(), its sha256 included


class SyncState(Base):
    """An export's channel API sync (SPEC 10 C9-C10, firefeed/sync): the account its ledger belongs to, the
    export's output columns (the names of each payload's values), and the last sync's outcome and time.
    The ledger itself is a table per export in the company's schema (`sync_ledger_table`)."""

    __tablename__ = "sync_state"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    export_name: Mapped[str] = mapped_column(Text, primary_key=True)
    target: Mapped[str] = mapped_column(Text)  # google-merchant | meta-catalog
    account: Mapped[str] = mapped_column(Text)  # `google-merchant:<account>/<data source>`, `meta-catalog:<catalog>`
    columns: Mapped[list[str]] = mapped_column(JSONB)
    run_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), nullable=True)
    last_sync_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_result: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    listed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    channel_issues: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)


class AlertDelivery(Base):
    """One alert a run's end (or a delivery) recorded, and the attempts to POST it (SPEC 10 C8, firefeed/alerts).

    An outbox: the run's end only inserts the row; a sender (a Celery task on `control`, or a bounded thread
    of a batch process) posts `body`, byte for byte the bytes it signs, until it is delivered or its time runs out.
    """

    __tablename__ = "alert_deliveries"
    __table_args__ = (
        # One alert of each event, export and address per run: a run's end recorded twice records it once.
        UniqueConstraint("run_id", "event", "export", "url", name="uq_alert_deliveries_once"),
        Index("ix_alert_deliveries_due", "next_attempt_at", postgresql_where=text("status = 'pending'")),
        Index("ix_alert_deliveries_project_created", "project_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    company_id: Mapped[str] = mapped_column(Text)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("pipeline_runs.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(32))
    export: Mapped[str] = mapped_column(Text, server_default=text("''"))
    url: Mapped[str] = mapped_column(Text)
    secret_name: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    # pending (to send), delivered, failed (gave up: a refusal or its retry time ran out)
    status: Mapped[str] = mapped_column(String(16), server_default=text("'pending'"))
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Each attempt: {at, status_code, error, ms}, the last ones kept so an operator sees why it failed.
    outcomes: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, server_default=text("'[]'::jsonb"))
