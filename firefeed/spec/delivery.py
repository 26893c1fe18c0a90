"""What an export's delivery target may say (SPEC 10 C7): checked when the spec is read.

A target is a file server (sftp://, ftp://, ftps://, with the keys of an SFTP/FTP source:
`password`, `private_key`, `host_key`, secrets by reference only) or an https:// URL that takes
a PUT (with `headers`, under the sources' header rules). Plain http:// is refused: a feed often
carries prices the merchant has not published yet, and a PUT's headers usually carry a token.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from firefeed.spec.headers import header_problem
from firefeed.spec.remote import remote_problem, remote_scheme

# Headers the PUT itself sets: its framing, its destination, its body's type and length.
_RESERVED = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
    }
)
_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@")


class DeliveryTarget(BaseModel):
    """One place an export's published file is handed to after each run that publishes it."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2000)
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str] = Field(default_factory=dict)
    password: str | None = None
    private_key: str | None = None
    host_key: str | None = None

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            problem = header_problem(name, value)
            if problem is not None:
                raise ValueError(problem)
            if name.strip().lower() in _RESERVED:
                raise ValueError(f"{name!r} can't be set: the PUT sets its own framing and connection headers")
        return v

    @model_validator(mode="after")
    def _target(self) -> DeliveryTarget:
        problem = target_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0].lower() if "://" in self.url else ""

    @property
    def shown(self) -> str:
        """The target as reports, logs and alerts name it: the URL as the spec writes it (a secret in it is
        still its reference; the spec never holds a password)."""
        return self.url.strip()


def target_problem(target: DeliveryTarget) -> str | None:
    """What is wrong with a target (the key named first), or None; never quotes the URL or a value."""
    url = target.url.strip()
    scheme = remote_scheme(url)
    if scheme is not None:
        if target.method != "PUT":
            return "method: a file server takes an upload, not an HTTP method"
        return remote_problem(
            url=url,
            headers=target.headers,
            password=target.password,
            private_key=target.private_key,
            host_key=target.host_key,
        )
    lowered = url.lower()
    if not lowered.startswith("https://"):
        if lowered.startswith("http://"):
            return "url: a delivery target must be https:// (or sftp://, ftps://, ftp://): plain http is refused"
        return "url: a delivery target is an sftp://, ftp://, ftps:// or https:// URL"
    for key, value in (("password", target.password), ("private_key", target.private_key)):
        if value is not None:
            return f"{key}: an https:// target authenticates with headers (a token from a secret), not {key}"
    if target.host_key is not None:
        return "host_key: only an sftp:// target takes host_key"
    if _USERINFO.match(url):
        return (
            "url: an https:// target takes no user or password in the URL; "
            'use headers: {Authorization: "${secret:NAME}"}'
        )
    if "${" not in url and not urlsplit(url).hostname:
        return "url: the URL has no host"
    return None
