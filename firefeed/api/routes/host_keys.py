"""/api/host-keys: the token's company's pinned SFTP host keys: list, read, pin and forget one (SPEC 10 C6).

The same keys as `firefeed host-key list|forget COMPANY`: the key a server presented at the company's
first fetch from it, or one the company pinned here before any fetch. Forgetting a key accepts the
server's next one; pinning replaces what was recorded. A host another company pinned answers 404 word
for word as a host nobody pinned: the keys are kept per company, and another company's are never read.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.bodies import bounded_body
from firefeed.api.deps import Store
from firefeed.errors import NotFoundError
from firefeed.pipeline.transfer.host_keys import (
    MAX_KEY_LINE_CHARS,
    HostKeyStore,
    StoredKey,
    host_port_text,
    parse_host_key,
    parse_host_port,
    pinned,
)

router = APIRouter(prefix="/api/host-keys", tags=["host keys"])

#: A PUT's body: the key line and the JSON around it; a larger body is refused before it is read whole.
_MAX_BODY_BYTES = MAX_KEY_LINE_CHARS + 1024


class PinBody(BaseModel):
    """The body of PUT /api/host-keys/{host}."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=MAX_KEY_LINE_CHARS)
    """The server's key as a known_hosts line (`[host]:port ssh-ed25519 AAAA…`, as ssh-keyscan prints it) or
    just `ssh-ed25519 AAAA…`; the host names at its start are not read (the path says which host)."""


class HostKey(BaseModel):
    host: str
    port: int
    address: str
    """`host:port` (`[v6]:port`), as the routes' path takes it."""
    fingerprint: str
    """`SHA256:…`, as `ssh-keygen -l` prints it."""
    public_key: str
    recorded_at: str


class HostKeyList(BaseModel):
    company: str
    host_keys: list[HostKey]


class HostKeyPinned(HostKey):
    created: bool


_HOST = "`host`, `host:port` or `[IPv6]:port` (port 22 when none is given)"
_NOT_PINNED: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "the company has no key pinned for that host and port"},
    422: {"model": schemas.ErrorBody, "description": f"not {_HOST} (`invalid_request`)"},
}


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_host_port(text)
    except ValueError as err:
        raise RequestValidationError([{"loc": ["path", "host"], "msg": str(err), "type": "value_error"}]) from None


def _view(key: StoredKey) -> HostKey:
    return HostKey(
        host=key.host,
        port=key.port,
        address=host_port_text(key.host, key.port),
        fingerprint=key.fingerprint,
        public_key=key.public_key,
        recorded_at=key.created_at.isoformat(),
    )


def _not_pinned(host: str, port: int) -> NotFoundError:
    # The same words whether nobody pinned the host or another company did: nothing tells them apart.
    return NotFoundError(f"no host key is pinned for {host_port_text(host, port)}")


@router.get("", response_model=HostKeyList)
def list_host_keys(company: CurrentCompany, store: Store) -> HostKeyList:
    """The company's pinned SFTP host keys, by host and port: each SHA256 fingerprint and public key."""
    return HostKeyList(company=company, host_keys=[_view(k) for k in HostKeyStore(store.engine, company).list()])


@router.get("/{host}", response_model=HostKey, responses=_NOT_PINNED)
def get_host_key(host: str, company: CurrentCompany, store: Store) -> HostKey:
    """The key pinned for one host and port."""
    name, port = _address(host)
    found = HostKeyStore(store.engine, company).stored(name, port)
    if found is None:
        raise _not_pinned(name, port)
    return _view(found)


@router.put(
    "/{host}",
    response_model=HostKeyPinned,
    responses={
        201: {"model": HostKeyPinned, "description": "pinned (no key was pinned for that host and port)"},
        409: {"model": schemas.ErrorBody, "description": "the company holds the most host keys one may"},
        413: {"model": schemas.ErrorBody, "description": "the body is larger than the route takes"},
        422: {"model": schemas.ErrorBody, "description": f"not {_HOST}, or the key is no known_hosts line"},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": PinBody.model_json_schema()}},
        }
    },
)
async def pin_host_key(host: str, request: Request, response: Response, company: CurrentCompany, store: Store) -> Any:
    """Pin a server's key (201), or replace the key recorded or pinned before (200): from now on a fetch
    from or a delivery to that host and port accepts only this key (a spec's own `host_key` still wins)."""
    name, port = _address(host)
    body = await bounded_body(request, _MAX_BODY_BYTES, f"the body is larger than {_MAX_BODY_BYTES} bytes")
    try:
        pin = PinBody.model_validate_json(body)
    except ValidationError as err:
        raise RequestValidationError(
            [{**e, "loc": ["body", *e["loc"]], "input": None} for e in err.errors(include_url=False)]
        ) from None
    try:
        key = pinned(parse_host_key(pin.key))
    except ValueError as err:
        raise RequestValidationError([{"loc": ["body", "key"], "msg": str(err), "type": "value_error"}]) from None
    found, created = await run_in_threadpool(HostKeyStore(store.engine, company).pin, name, port, key)
    response.status_code = 201 if created else 200
    return HostKeyPinned(**_view(found).model_dump(), created=created)


@router.delete("/{host}", status_code=204, responses=_NOT_PINNED)
def forget_host_key(host: str, company: CurrentCompany, store: Store) -> Response:
    """Forget the key pinned for one host and port: the next fetch from it records the key it presents.
    Confirm the server's new fingerprint with its owner first."""
    name, port = _address(host)
    if not HostKeyStore(store.engine, company).forget(name, port):
        raise _not_pinned(name, port)
    return Response(status_code=204)
