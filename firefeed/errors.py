"""One error tree: every error FireFeed raises on purpose is a FireFeedError.

Each class carries the offending id and a message a user can act on; the API
maps them to HTTP status codes in one handler and the CLI to exit codes.
"""

from __future__ import annotations

from typing import Any


class FireFeedError(Exception):
    """FireFeed failed."""

    code = "firefeed_error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConfigError(FireFeedError):
    """A setting is missing or invalid."""

    code = "config_error"


class SpecError(FireFeedError):
    """The project spec is invalid."""

    code = "spec_error"

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.detail = message
        #: every problem found in the document, this one first (more than one: `SpecError.of`)
        self.problems: list[SpecError] = [self]
        super().__init__(f"{path}: {message}" if path else message)

    @classmethod
    def of(cls, problems: list[SpecError]) -> SpecError:
        """One error for all `problems` of a document, so a spec with three mistakes is fixed in one go.

        Its path and detail are the first problem's (what a caller that reads one error sees); its text
        lists every problem on a line of its own.
        """
        flat = [p for err in problems for p in err.problems]
        if len(flat) == 1:
            return flat[0]
        first = flat[0]
        err = cls(first.path, first.detail)
        err.problems = flat
        err.args = (f"{len(flat)} problems in the spec:\n" + "\n".join(f"  {p}" for p in flat),)
        return err


class SourceError(FireFeedError):
    """A source feed could not be used."""

    code = "source_error"

    def __init__(self, source: str, message: str, *, what: str = "source") -> None:
        self.source, self.reason, self.what = source, message, what
        super().__init__(f"{what} {source!r}: {message}")

    def as_lookup(self) -> SourceError:
        """The same error of the same class, naming a lookup table (fetched and parsed as a source is)."""
        err = type(self)(self.source, self.reason, what="lookup")
        err.__dict__.update({k: v for k, v in self.__dict__.items() if k != "what"})
        return err


class FetchError(SourceError):
    """A source feed could not be downloaded."""

    code = "fetch_error"


class UnsafeURLError(FetchError):
    """A source URL, or a redirect from it, points somewhere FireFeed may not fetch from."""

    code = "unsafe_url"


class InvalidSourceRequestError(FetchError):
    """The request the spec describes for a source cannot be sent: an empty or invalid URL, a URL with no
    host, a bad header name or value, a reference that cannot be expanded.

    Its own class (and code) because it is the spec's mistake, found before anything was asked of a
    server: the API answers it 422 like `unsafe_url`, not 502 as a server that failed.
    """

    code = "invalid_source_request"


class ParseError(SourceError):
    """A source feed could not be parsed."""

    code = "parse_error"


class MergeError(FireFeedError):
    """The sources could not be merged."""

    code = "merge_error"


class RulesError(FireFeedError):
    """The rules could not be applied."""

    code = "rules_error"


class ExportError(FireFeedError):
    """An export could not be written."""

    code = "export_error"

    def __init__(self, export: str, message: str) -> None:
        self.export = export
        super().__init__(f"export {export!r}: {message}")


class PublishBlockedError(FireFeedError):
    """A written export failed a check before publish; the previous exports stay published."""

    code = "publish_blocked"

    def __init__(self, message: str, exports: list[str]) -> None:
        self.exports = exports
        super().__init__(message)


class DropGuardError(PublishBlockedError):
    """An export would lose more of its items than its max_drop allows; accept_drop publishes it anyway."""

    code = "drop_guard"


class ChannelRejectError(PublishBlockedError):
    """An export with `fail_on` has findings its channel would reject."""

    code = "channel_errors"


class UnsafePathError(FireFeedError):
    """A path escapes the folder it must stay in.

    `source` (a source or, with `what="lookup"`, a lookup table) or `export` names whose path it is, so an
    API body can say which part of the spec to fix, as a SourceError's does; both are None for a path
    of FireFeed's own (a storage key).
    """

    code = "unsafe_path"

    def __init__(
        self,
        message: str | None = None,
        *,
        source: str | None = None,
        export: str | None = None,
        what: str = "source",
    ) -> None:
        self.reason = message or (self.__doc__ or "").strip().splitlines()[0]
        self.source, self.export, self.what = source, export, what
        if source is not None:
            super().__init__(f"{what} {source!r}: {self.reason}")
        elif export is not None:
            super().__init__(f"export {export!r}: {self.reason}")
        else:
            super().__init__(self.reason)

    def as_lookup(self) -> UnsafePathError:
        """The same error naming a lookup table (whose local path is checked as a source's is)."""
        return type(self)(self.reason, source=self.source, export=self.export, what="lookup")

    def for_export(self, export: str) -> UnsafePathError:
        """The same error naming the export whose path it is (the path checks know only the path)."""
        return type(self)(self.reason, export=export)


class StorageError(FireFeedError):
    """The file storage (FIREFEED_STORAGE_URL) could not read, write or move a file."""

    code = "storage_error"


class NotFoundError(FireFeedError):
    """No such object."""

    code = "not_found"


class PayloadTooLargeError(FireFeedError):
    """A request body is larger than the route takes (its bound is named in the message)."""

    code = "payload_too_large"


class SpecChangedError(FireFeedError):
    """The spec was applied by someone else while an edit of it was made: the edit is made again on it."""

    code = "spec_changed"


class LookupNotInlineError(FireFeedError):
    """Rows can be added only to a lookup whose rows are in the spec (`rows:`), not one read from a URL."""

    code = "lookup_not_inline"


class PipelineBusyError(FireFeedError):
    """The project already has a run in progress."""

    code = "pipeline_busy"

    def __init__(self, project: str, run_id: str | None) -> None:
        self.project = project
        self.run_id = run_id
        super().__init__(f"project {project!r} already has an active run {run_id}")


class EnqueueError(FireFeedError):
    """The run could not be handed to the broker."""

    code = "enqueue_failed"


class AuthenticationError(FireFeedError):
    """A valid bearer token is required: send `Authorization: Bearer <token>`."""

    code = "unauthorized"


class CompanyLimitError(FireFeedError):
    """The company already holds as much as one company may (secrets, spec versions): the message names
    the setting; delete something first, or ask the operator to raise it."""

    code = "company_limit"


class ProcessInputError(FireFeedError):
    """The row's input_data does not fit its function."""

    code = "bad_input"


class RunCancelledError(FireFeedError):
    """The run was cancelled."""

    code = "run_cancelled"


class StepFailedError(FireFeedError):
    """A step job failed; `error` is what the job recorded (the RunReport's step, type and message)."""

    code = "step_failed"

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        super().__init__(str(error.get("message")))


class JobLostError(FireFeedError):
    """The job was taken over by another worker (its lease ran out); this worker's work must not count."""

    code = "job_lost"


class RunEndedError(FireFeedError):
    """The run ended while its driver still worked on it (its heartbeat went stale and it was failed):
    nothing of it is published; start a new run."""

    code = "run_ended"


class JobPickupTimeoutError(FireFeedError):
    """No job of a step moved for FIREFEED_JOB_PICKUP_TIMEOUT_S: no worker takes them."""

    code = "job_pickup_timeout"


class StatementTimeoutError(FireFeedError):
    """A statement ran longer than FIREFEED_STATEMENT_TIMEOUT_S and Postgres cancelled it."""

    code = "statement_timeout"


class StepTimeLimitError(FireFeedError):
    """A step job ran longer than FIREFEED_STEP_TIME_LIMIT_S and its statements were cancelled."""

    code = "step_time_limit"


class PreviewTimeoutError(FireFeedError):
    """A preview did not finish within its deadline (FIREFEED_PREVIEW_DEADLINE_S)."""

    code = "preview_timeout"


class PreviewFailedError(FireFeedError):
    """The database refused one of a preview's statements: the caller gets the database's message, not a
    traceback (a run reports the same failure as its step's error)."""

    code = "preview_failed"


class PreviewRefusedError(PreviewFailedError):
    """The database refused the preview's data or its size (SQLSTATE classes 22 and 54): the spec's or the
    feed's doing, as a spec error is, so the API answers 422 with the same code."""


class PreviewUnavailableError(PreviewFailedError):
    """The database could not serve the preview now (SQLSTATE classes 08, 40, 53, 55, 57): the API answers
    503 with the same code, and a retry may succeed."""


class RetryLaterError(FireFeedError):
    """Too busy for this request now: try again in `retry_after` seconds."""

    code = "retry_later"

    def __init__(self, message: str, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class TooManySpecWritesError(RetryLaterError):
    """The company already has as many spec writes in progress as one API process validates at once."""

    code = "too_many_spec_writes"


class TooManyPreviewsError(RetryLaterError):
    """The company already runs as many previews at once as FIREFEED_PREVIEW_PER_COMPANY allows."""

    code = "too_many_previews"


class PreviewsBusyError(RetryLaterError):
    """Every preview worker (FIREFEED_PREVIEW_POOL_SIZE) is busy."""

    code = "previews_busy"


class TooManyValuesCallsError(RetryLaterError):
    """The company already has as many values calls in progress as FIREFEED_VALUES_PER_COMPANY allows."""

    code = "too_many_values_calls"


class ValuesBusyError(RetryLaterError):
    """Every values worker (FIREFEED_VALUES_POOL_SIZE) is busy."""

    code = "values_busy"


class TooManySyncCallsError(RetryLaterError):
    """The company already runs as many API sync repairs or refreshes as FIREFEED_SYNC_API_PER_COMPANY allows."""

    code = "too_many_sync_calls"


class SyncCallsBusyError(RetryLaterError):
    """Every thread for API sync calls (FIREFEED_SYNC_API_POOL_SIZE) is busy."""

    code = "sync_calls_busy"


class SyncCallTimeoutError(FireFeedError):
    """An API repair or refresh of a sync did not answer within FIREFEED_SYNC_MAX_S."""

    code = "sync_call_timeout"


class ValuesTimeoutError(FireFeedError):
    """A values call did not finish within its deadline (FIREFEED_VALUES_DEADLINE_S)."""

    code = "values_timeout"
