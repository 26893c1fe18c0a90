"""/api/tokens: the token's company lists its API tokens and revokes them; no route shows a token itself.

Creating one stays with the operator (`firefeed token create --company C [--expires-in DAYS]`): a token
that could mint tokens would outlive its own revocation.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany, tokens

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


class TokenList(BaseModel):
    company: str
    tokens: list[TokenSummary]


@router.get("", response_model=TokenList)
async def list_tokens(request: Request, company: CurrentCompany) -> TokenList:
    """The company's tokens, revoked and expired ones included."""
    found = await run_in_threadpool(tokens(request).list, company)
    return TokenList(company=company, tokens=[TokenSummary(**t.as_dict()) for t in found])


@router.delete(
    "/{token_id}",
    status_code=204,
    responses={404: {"model": schemas.ErrorBody, "description": "the company has no token of that id"}},
)
async def revoke_token(token_id: int, request: Request, company: CurrentCompany) -> Response:
    """Revoke one of the company's tokens (the one sending this too): refused with 401 from now on by this
    API process, by the others within FIREFEED_TOKEN_CACHE_S. Revoking it again changes nothing."""
    await run_in_threadpool(tokens(request).revoke, company, token_id)
    return Response(status_code=204)
