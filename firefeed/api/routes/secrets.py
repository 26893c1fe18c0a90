"""/api/secrets: set, list and delete the token's company's secrets; no route ever reads a value back.

A secret is used as `${secret:NAME}` in the company's source URLs and headers
and expanded only when a source is fetched (firefeed/secrets).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store
from firefeed.secrets.store import SecretStore, check_name, check_value

router = APIRouter(prefix="/api/secrets", tags=["secrets"])


class SecretValue(BaseModel):
    """The body of PUT /api/secrets/{name}."""

    model_config = ConfigDict(extra="forbid")

    value: str
    """Sent in headers or URLs where a spec writes `${secret:NAME}`: no line breaks, at most 16 KiB."""


class SecretSummary(BaseModel):
    name: str
    updated_at: str


class SecretList(BaseModel):
    company: str
    secrets: list[SecretSummary]


class SecretSaved(BaseModel):
    company: str
    name: str
    created: bool
    reference: str
    """How a spec names it: `${secret:NAME}`."""


_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": schemas.ErrorBody, "description": "a bad name or value (`invalid_request`; the value is not shown)"},
    500: {"model": schemas.ErrorBody, "description": "the server has no FIREFEED_SECRETS_KEY (`config_error`)"},
}


def _invalid(where: str, err: ValueError) -> RequestValidationError:
    return RequestValidationError([{"loc": where.split("."), "msg": str(err), "type": "value_error"}])


@router.get("", response_model=SecretList)
def list_secrets(company: CurrentCompany, store: Store) -> SecretList:
    """The names of the token's company's secrets and when each was last set; never a value."""
    found = SecretStore(store.engine).list(company)
    return SecretList(
        company=company, secrets=[SecretSummary(name=s.name, updated_at=s.updated_at.isoformat()) for s in found]
    )


@router.put(
    "/{name}",
    response_model=SecretSaved,
    responses={201: {"model": SecretSaved, "description": "created"}, **_RESPONSES},
)
def put_secret(name: str, body: SecretValue, response: Response, company: CurrentCompany, store: Store) -> SecretSaved:
    """Create (201) or replace (200) a secret of the token's company; the answer never holds the value."""
    try:
        check_name(name)
    except ValueError as err:
        raise _invalid("path.name", err) from None
    try:
        check_value(body.value)
    except ValueError as err:
        raise _invalid("body.value", err) from None
    created = SecretStore(store.engine).set(company, name, body.value)
    response.status_code = 201 if created else 200
    return SecretSaved(company=company, name=name, created=created, reference=f"${{secret:{name}}}")


@router.delete(
    "/{name}",
    status_code=204,
    responses={404: {"model": schemas.ErrorBody, "description": "the company has no secret of that name"}},
)
def delete_secret(name: str, company: CurrentCompany, store: Store) -> Response:
    """Forget a secret; a spec that still names it fails at its next fetch, saying so."""
    SecretStore(store.engine).delete(company, name)
    return Response(status_code=204)
