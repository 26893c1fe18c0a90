"""`${secret:NAME}` and `${VAR}` in a source's URL and headers: parsed, checked, expanded, hidden again.

Where a reference may come from depends on who applied the spec (its origin):

- a company's own secret, `${secret:NAME}`, in every spec, from that company only;
- an environment variable, `${VAR}`, only in a spec applied from a file through
  the CLI (`firefeed run`, `firefeed apply`: someone with a shell on the server),
  and only for names the operator lists in FIREFEED_SPEC_ENV_ALLOW. A spec sent
  over the API or the processes table may not name one at all: its author must
  not be able to send the server's environment to a server of their choosing.

The origin travels as the spec's folder (`spec_dir`): a spec applied from a file
has one, a spec sent over the API or the processes table has none. It is stored
on the project row and copied into every run's snapshot, so a beat or API run of
a CLI-applied spec may still expand its allowed `${VAR}`, and one PUT replaces
the spec and drops the folder, so no CLI-applied `${VAR}` survives it.

The message for an environment variable that may not be used is the same
whether or not it is set: it tells nothing about the environment. Every value a
Resolver expands is remembered, so the fetch can hide it again in its messages
and in the HTTP library's log lines.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from firefeed.errors import ConfigError, FetchError, InvalidSourceRequestError, SpecError

if TYPE_CHECKING:
    from firefeed.spec.model import FeedSpec, ProjectSpec

REFERENCE = re.compile(r"\$\{([^}]*)\}")
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_PREFIX = "secret:"

REMOTE_ENV = "environment variables can't be used in specs sent over the API or the processes table; use ${secret:NAME}"
# One message whether the variable is unset or not allowed: it must not tell which variables exist.
NOT_ALLOWED = (
    "which is not set or not allowed (FIREFEED_SPEC_ENV_ALLOW names the environment variables "
    "a spec may use); use ${secret:NAME}"
)


class Kind(StrEnum):
    SECRET = "secret"
    ENV = "env"


class SpecOrigin(StrEnum):
    """Who applied a spec, which decides whether it may read the environment."""

    CLI = "cli"  # from a file, through `firefeed run` / `apply` / `preview`
    REMOTE = "remote"  # over the API or the processes table


def origin_of(spec_dir: Path | str | None) -> SpecOrigin:
    """A spec with a folder was applied from a file (the CLI); one without came over the API or a process."""
    return SpecOrigin.CLI if spec_dir else SpecOrigin.REMOTE


@dataclass(frozen=True)
class Reference:
    kind: Kind
    name: str
    text: str  # as written, `${secret:NAME}` or `${VAR}`


def find_references(text: str) -> list[Reference]:
    """Every reference in `text`; ValueError naming a `${...}` that is neither form."""
    found: list[Reference] = []
    for match in REFERENCE.finditer(text):
        found.append(parse_reference(match.group(0), match.group(1)))
    return found


def parse_reference(text: str, inner: str) -> Reference:
    if inner.startswith(_SECRET_PREFIX):
        name = inner[len(_SECRET_PREFIX) :]
        if not SECRET_NAME.fullmatch(name):
            raise ValueError(f"{text} is not a secret reference: a secret's name is 1-64 letters, digits or _")
        return Reference(Kind.SECRET, name, text)
    if not ENV_NAME.fullmatch(inner):
        raise ValueError(
            f"{text} is not a reference: write ${{secret:NAME}} (or ${{VAR}} in a spec applied by the CLI)"
        )
    return Reference(Kind.ENV, inner, text)


def env_allowed(name: str, allow: str) -> bool:
    """Whether FIREFEED_SPEC_ENV_ALLOW (comma list; `PREFIX*` for a prefix) lets specs read `name`."""
    for entry in (e.strip() for e in allow.split(",")):
        if not entry:
            continue
        if entry.endswith("*"):
            if name.startswith(entry[:-1]):
                return True
        elif name == entry:
            return True
    return False


def check_spec(spec: ProjectSpec, origin: SpecOrigin, env_allow: str) -> None:
    """Refuse, naming the key, a reference in a source's URL or headers that the spec may not make.

    Run when a spec is applied or previewed; the fetch checks again, with the worker's settings.
    """
    from firefeed.spec.paths import join_key

    feeds: list[tuple[str, FeedSpec]] = [(f"sources[{i}]", s) for i, s in enumerate(spec.sources)]
    # fetched like sources (SPEC 9); one whose rows are in the spec is never fetched
    feeds += [(f"lookups[{i}]", lk) for i, lk in enumerate(spec.lookups) if not lk.inline]
    for where, src in feeds:
        url, headers = src.url, src.headers
        places = [(f"{where}.url", url)] + [(join_key(f"{where}.headers", k), v) for k, v in headers.items()]
        places += [(f"{where}.{k}", v) for k, v in (("password", src.password), ("private_key", src.private_key)) if v]
        for path, text in places:
            try:
                references = find_references(str(text))
            except ValueError as err:
                raise SpecError(path, str(err)) from None
            for ref in references:
                if ref.kind is not Kind.ENV:
                    continue
                if origin is SpecOrigin.REMOTE:
                    raise SpecError(path, REMOTE_ENV)
                if not env_allowed(ref.name, env_allow):
                    raise SpecError(path, f"uses {ref.text}, {NOT_ALLOWED}")


SecretLookup = Callable[[str], "str | None"]


class Resolver:
    """Expands one spec's references at fetch time and remembers each value, to hide it again."""

    def __init__(
        self,
        *,
        company: str | None,
        origin: SpecOrigin,
        env_allow: str = "",
        secret: SecretLookup | None = None,
    ) -> None:
        self.company = company
        self.origin = origin
        self.env_allow = env_allow
        self._secret = secret
        self._cache: dict[str, str | None] = {}
        self._hidden: dict[str, str] = {}  # a value (or its URL-encoded form) -> the reference it came from

    @classmethod
    def closed(cls) -> Resolver:
        """Expands nothing: every reference is refused (the default when a caller names no spec origin)."""
        return cls(company=None, origin=SpecOrigin.REMOTE)

    def expand(self, text: str, *, source: str, where: str, in_url: bool = False) -> str:
        """`text` with its references replaced; FetchError (`where` names the place) for one that can't be.

        InvalidSourceRequestError when the spec is at fault (a malformed reference, one its origin may not
        use, a secret its company has not set); a plain FetchError when the server cannot read secrets.

        In a URL a value is inserted percent-encoded, so it cannot change the URL's shape (host, path, query).
        """

        def one(match: re.Match[str]) -> str:
            try:
                ref = parse_reference(match.group(0), match.group(1))
            except ValueError as err:
                raise InvalidSourceRequestError(source, f"{where}: {err}") from None
            value = self._value(ref, source=source, where=where)
            self._hide(value, ref.text)
            if in_url:
                value = quote(value, safe="")
                self._hide(value, ref.text)
            return value

        return REFERENCE.sub(one, text)

    def _value(self, ref: Reference, *, source: str, where: str) -> str:
        if ref.kind is Kind.ENV:
            if self.origin is SpecOrigin.REMOTE:
                raise InvalidSourceRequestError(source, f"{where} uses {ref.text}: {REMOTE_ENV}")
            value = os.environ.get(ref.name) if env_allowed(ref.name, self.env_allow) else None
            if value is None:
                raise InvalidSourceRequestError(source, f"{where} uses {ref.text}, {NOT_ALLOWED}")
            return value
        if self.company is None or self._secret is None:
            raise InvalidSourceRequestError(
                source, f"{where} uses {ref.text}, but no company's secrets are available here"
            )
        if ref.name not in self._cache:
            try:
                self._cache[ref.name] = self._secret(ref.name)
            except ConfigError as err:
                raise FetchError(source, f"{where} uses {ref.text}: {err.message}") from None
        found = self._cache[ref.name]
        if found is None:
            raise InvalidSourceRequestError(
                source,
                f"{where} uses {ref.text}, which company {self.company!r} has not set "
                f"(`firefeed secret set --company {self.company} {ref.name}` or PUT /api/secrets/{ref.name})",
            )
        return found

    def _hide(self, value: str, text: str) -> None:
        if value:
            self._hidden[value] = text

    def mask(self, text: str) -> str:
        """`text` with every value this resolver expanded replaced by its reference."""
        return _mask(text, self._hidden)

    def scrub(self, err: BaseException) -> None:
        """Hide the expanded values in `err`'s message; drop its cause chain when a library's text quotes one."""
        if not self._hidden:
            return
        err.args = tuple(self.mask(a) if isinstance(a, str) else a for a in err.args)
        chain: BaseException | None = err.__cause__ or err.__context__
        while chain is not None:
            if self.mask(f"{chain!s} {chain!r}") != f"{chain!s} {chain!r}":
                err.__cause__ = None
                err.__context__ = None
                err.__suppress_context__ = True
                return
            chain = chain.__cause__ or chain.__context__

    def hiding(self) -> AbstractContextManager[None]:
        """While the block runs, the HTTP library's log lines hide the values expanded so far (expand first)."""
        return hiding_in_library_logs(self._hidden)


def _mask(text: str, hidden: dict[str, str]) -> str:
    # Longest first: a value that contains another is replaced whole.
    for value in sorted(hidden, key=len, reverse=True):
        if value in text:
            text = text.replace(value, hidden[value])
    return text


# -- the HTTP library's log lines ---------------------------------------------
# httpx logs every request's full URL at INFO; a URL may hold a secret. The values of the fetches
# running right now (any thread) are hidden in the records of these loggers.
_active: dict[str, tuple[str, int]] = {}
_active_lock = threading.Lock()
_LIBRARY_LOGGERS = (
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "asyncssh",  # sftp:// sources (firefeed/pipeline/transfer)
)


@contextmanager
def hiding_in_library_logs(hidden: dict[str, str]) -> Iterator[None]:
    """While the block runs, every value of `hidden` in the HTTP library's log lines (any thread) reads as
    its text (a secret as its reference, an alert URL as its host)."""
    values = dict(hidden)
    _register(values, +1)
    try:
        yield
    finally:
        _register(values, -1)


def _register(hidden: dict[str, str], step: int) -> None:
    with _active_lock:
        for value, text in hidden.items():
            _, count = _active.get(value, (text, 0))
            if count + step > 0:
                _active[value] = (text, count + step)
            else:
                _active.pop(value, None)


class _HideActiveValues(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        with _active_lock:
            hidden = {value: text for value, (text, _) in _active.items()}
        if hidden:
            message = record.getMessage()
            masked = _mask(message, hidden)
            if masked != message:
                record.msg, record.args = masked, None
        return True


_FILTER = _HideActiveValues()
for _name in _LIBRARY_LOGGERS:
    logging.getLogger(_name).addFilter(_FILTER)
