"""/api/tokens: the token's company creates API tokens, lists them and revokes them (the page's settings).

A token created here is shown once, in the 201 answer, and never again (only its hash is stored; no route,
listing or log line carries it). It is bounded by the token that created it (firefeed/runs/tokens.py): it
records it as `parent_id`, never expires after it, and is revoked with it, transitively; a revoked or expired
token creates nothing, and a company holds at most FIREFEED_TOKENS_PER_COMPANY active tokens. So a leaked
token can be cut off with everything it minted by one revoke, which is what kept creation with the operator
(`firefeed token create`, which makes roots) before.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field, field_validator

from firefeed.api import schemas
from firefeed.api.auth import CurrentCaller, CurrentCompany, tokens
from firefeed.runs.tokens import MAX_EXPIRES_IN, NAME_MAX, check_name

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/tokens", tags=["tokens"])


class TokenSummary(BaseModel):
    id: int
    prefix: str
    """The token's first characters, to tell tokens apart; never the token."""
    state: str
    """`active`, `expired` or `revoked`."""
    created_at: str
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None
    """When a request last used it, to the minute; null if never."""
    parent_id: int | None
    """The token that created this one over the API; null: made by the operator (`firefeed token create`)."""
    name: str | None
    """The label given when it was created; plain text, to be shown as text."""


class TokenCreate(BaseModel):
    expires_in_days: int | None = Field(default=None, ge=1, le=MAX_EXPIRES_IN.days)
    """Refused after this many days, and never after the token creating it; null: when that one expires."""
    name: str | None = Field(default=None, max_length=NAME_MAX)
    """A label to tell it apart (one line, at most 100 characters); blank: none."""

    @field_validator("name")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        return check_name(value)


class TokenCreated(BaseModel):
    id: int
    token: str
    """The token itself: shown in this answer once, never again (only its hash is stored)."""
    prefix: str
    expires_at: str | None
    parent_id: int
    """The token that sent the request: revoking it revokes this one too."""
    name: str | None


class TokenList(BaseModel):
    company: str
    tokens: list[TokenSummary]
    total: int
    """How many tokens the company has, revoked and expired ones included."""
    offset: int
    limit: int
    next_offset: int | None
    """The offset of the next page; null on the last."""


#: a page of tokens: a company's revoked tokens pile up without bound (each revoke frees a place for a new one)
DEFAULT_LIMIT, MAX_LIMIT = 100, 1000


@router.get("", response_model=TokenList)
async def list_tokens(
    request: Request,
    company: CurrentCompany,
    offset: Annotated[int, Query(ge=0, le=schemas.MAX_OFFSET, description="skip this many tokens")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="at most this many tokens")] = DEFAULT_LIMIT,
) -> TokenList:
    """A page of the company's tokens, revoked and expired ones included: the active ones first (so the
    first page holds every one of them), then the expired, then the revoked, each oldest first."""
    found, total = await run_in_threadpool(tokens(request).page, company, offset, limit)
    return TokenList(
        company=company,
        tokens=[TokenSummary(**t.as_dict()) for t in found],
        total=total,
        offset=offset,
        limit=limit,
        next_offset=offset + limit if offset + limit < total else None,
    )


@router.post(
    "",
    status_code=201,
    response_model=TokenCreated,
    responses={
        401: {"model": schemas.ErrorBody, "description": "the sending token is unknown, expired or revoked"},
        409: {"model": schemas.ErrorBody, "description": "company_limit: FIREFEED_TOKENS_PER_COMPANY active tokens"},
    },
)
async def create_token(body: TokenCreate, request: Request, caller: CurrentCaller) -> TokenCreated:
    """A new token of the company, child of the one sending this: revoked with it, never outliving it."""
    expires_in = timedelta(days=body.expires_in_days) if body.expires_in_days is not None else None
    issued = await run_in_threadpool(
        lambda: tokens(request).issue(caller.company, expires_in, parent_id=caller.token_id, name=body.name)
    )
    info = issued.info
    # The prefix only, as every listing shows it: the token itself is never logged.
    log.info(
        "company %s: token %d (%s…) created by token %d, expires %s",
        caller.company,
        info.id,
        info.prefix,
        caller.token_id,
        info.expires_at.isoformat() if info.expires_at else "never",
    )
    return TokenCreated(
        id=info.id,
        token=issued.token,
        prefix=info.prefix,
        expires_at=info.expires_at.isoformat() if info.expires_at else None,
        parent_id=caller.token_id,
        name=info.name,
    )


@router.delete(
    "/{token_id}",
    status_code=204,
    responses={404: {"model": schemas.ErrorBody, "description": "the company has no token of that id"}},
)
async def revoke_token(token_id: int, request: Request, company: CurrentCompany) -> Response:
    """Revoke one of the company's tokens (the one sending this too) and every token it created, transitively:
    refused with 401 from now on by this API process, by the others within FIREFEED_TOKEN_CACHE_S. Revoking it
    again changes nothing."""
    await run_in_threadpool(tokens(request).revoke, company, token_id)
    return Response(status_code=204)
