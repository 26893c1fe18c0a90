"""Bearer-token auth: every /api route runs as the one company its token belongs to.

Another company's project or run answers 404, never 403, so a token cannot
even learn what exists outside its company.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from firefeed.errors import AuthenticationError
from firefeed.runs.tokens import Caller, TokenStore

# auto_error=False: a missing header goes through the one error handler like every other error.
_bearer = HTTPBearer(
    auto_error=False,
    description="A token from `firefeed token create --company C`, or one a token created (POST /api/tokens).",
)


def tokens(request: Request) -> TokenStore:
    store: TokenStore = request.app.state.tokens
    return store


async def current_caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    """The company and token id of the request's bearer token; AuthenticationError (401) without a valid one.

    Async on purpose: a recently seen token is answered from memory on the event loop, and only an
    unknown one costs a trip to the thread pool and the database.
    """
    if credentials is None:
        raise AuthenticationError("missing bearer token: send `Authorization: Bearer <token>`")
    store = tokens(request)
    caller = store.cached_caller(credentials.credentials) or await run_in_threadpool(
        store.identify, credentials.credentials
    )
    if caller is None:
        raise AuthenticationError("unknown, expired or revoked token")
    return caller


CurrentCaller = Annotated[Caller, Depends(current_caller)]


async def current_company(caller: CurrentCaller) -> str:
    """The company of the request's bearer token (every route but token creation needs no more)."""
    return caller.company


CurrentCompany = Annotated[str, Depends(current_company)]
