"""The one error handler: FireFeedError subclasses -> HTTP status codes and a stable JSON body.

Every error body has `error` (the exception's `.code`, a stable machine-readable
string) and `message` (for a person); some add the id a caller needs next:
the active `run_id` of a busy project, the `path` of a bad spec key (`""` when
the error is about the document as a whole: too large, not UTF-8, not YAML or
JSON, not a mapping), the `source` of a source (or lookup) error, the `source`
or `export` whose path is an `unsafe_path`.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from firefeed.errors import (
    AuthenticationError,
    CompanyLimitError,
    ConfigError,
    EnqueueError,
    FetchError,
    FireFeedError,
    InvalidSourceRequestError,
    LookupNotInlineError,
    MergeError,
    NotFoundError,
    PayloadTooLargeError,
    PipelineBusyError,
    PreviewRefusedError,
    PreviewsBusyError,
    PreviewTimeoutError,
    PreviewUnavailableError,
    RetryLaterError,
    RunCancelledError,
    SourceError,
    SpecChangedError,
    SpecError,
    SyncCallsBusyError,
    SyncCallTimeoutError,
    TooManyPreviewsError,
    TooManySpecWritesError,
    TooManySyncCallsError,
    TooManyValuesCallsError,
    UnsafePathError,
    UnsafeURLError,
    ValuesBusyError,
    ValuesTimeoutError,
)

log = logging.getLogger(__name__)


# Most specific first: the first matching class decides the status.
STATUS: tuple[tuple[type[FireFeedError], int], ...] = (
    (AuthenticationError, 401),
    # The company holds as much as one may (secrets, spec versions): deleting something resolves it.
    (CompanyLimitError, 409),
    (NotFoundError, 404),
    (PayloadTooLargeError, 413),
    # Rows go only into a lookup the spec holds; a url lookup's rows are its file's.
    (LookupNotInlineError, 409),
    (SpecChangedError, 409),
    (PipelineBusyError, 409),
    (RunCancelledError, 409),
    (SpecError, 422),
    (EnqueueError, 503),
    # The server lacks a setting the request needs (FIREFEED_SECRETS_KEY for secrets): not the caller's fault.
    (ConfigError, 503),
    # Previews (issue #15): one company's limit is its own doing (429), a full pool is the server's (503).
    (TooManyPreviewsError, 429),
    (TooManySpecWritesError, 429),
    (PreviewsBusyError, 503),
    (PreviewTimeoutError, 504),
    # Values calls (issue #47): bounded as previews are.
    (TooManyValuesCallsError, 429),
    (ValuesBusyError, 503),
    (ValuesTimeoutError, 504),
    # API sync repairs and refreshes (#51): bounded as previews are.
    (TooManySyncCallsError, 429),
    (SyncCallsBusyError, 503),
    (SyncCallTimeoutError, 504),
    # A statement the database refused: the data's doing (422), the database's state (503), else ours (500).
    (PreviewRefusedError, 422),
    (PreviewUnavailableError, 503),
    # Sources are only read in a request by a preview: a refused or unreadable one is the spec's problem
    # (a destination or redirect refused for safety, a request the spec describes that cannot be sent),
    # an upstream server that fails is a bad gateway.
    (UnsafeURLError, 422),
    (InvalidSourceRequestError, 422),
    (UnsafePathError, 422),
    (FetchError, 502),
    (SourceError, 422),
    (MergeError, 422),
)
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def status_of(err: FireFeedError) -> int:
    for cls, status in STATUS:
        if isinstance(err, cls):
            return status
    # An unmapped FireFeedError reaching the API is the server's problem, not the caller's.
    return 500


def error_body(err: FireFeedError) -> dict[str, Any]:
    body: dict[str, Any] = {"error": err.code, "message": err.message}
    if isinstance(err, PipelineBusyError):
        body["project"] = err.project
        body["run_id"] = err.run_id
        body["links"] = {"run": f"/api/runs/{err.run_id}"} if err.run_id else {}
    elif isinstance(err, SpecError):
        body["path"] = err.path
        body["message"] = err.detail
        if len(err.problems) > 1:  # every mistake of the document, each at its key (the first is path/message)
            body["problems"] = [{"path": p.path, "message": p.detail} for p in err.problems]
    elif isinstance(err, SourceError):
        body["source"] = err.source
    elif isinstance(err, UnsafePathError):
        if err.source is not None:
            body["source"] = err.source
        if err.export is not None:
            body["export"] = err.export
    elif isinstance(err, RetryLaterError):
        body["retry_after"] = err.retry_after
    return body


async def handle_firefeed_error(request: Request, exc: Exception) -> JSONResponse:
    """The one mapping from FireFeed's error tree to HTTP."""
    assert isinstance(exc, FireFeedError)
    status = status_of(exc)
    if isinstance(exc, RetryLaterError | PreviewTimeoutError | ValuesTimeoutError):
        log.warning("%s %s: %s", request.method, request.url.path, exc)  # a limit doing its job, not a fault
    elif status >= 500:
        log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if isinstance(exc, RetryLaterError):
        headers = {"Retry-After": str(exc.retry_after)}
    return JSONResponse(error_body(exc), status_code=status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Framework errors (unknown route, wrong method) in the same body shape."""
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return JSONResponse({"error": code, "message": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    path = ".".join(str(p) for p in first.get("loc", ()))
    return JSONResponse(
        {"error": "invalid_request", "message": str(first.get("msg", "invalid request")), "path": path},
        status_code=422,
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # Details stay in the log: a stack trace is no answer for an API client.
    log.error("%s %s failed unexpectedly", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": "internal_error", "message": "internal error, see the server log"}, 500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(FireFeedError, handle_firefeed_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(Exception, _unexpected)
