"""What a spec names that only the server can judge, checked when it is applied, not first at FETCH.

A local source outside the allowed folders and a `${secret:NAME}` the company does not have were found
only when a run fetched (exit 1, a FAILED run): a merchant learnt of a typo after waiting for the run.
Both are spec errors at `apply`/`run` time now (exit 2, 422), naming the key, and for a path the allowed
folders and FIREFEED_LOCAL_SOURCES_ROOT. FETCH checks again, with the worker's settings: the folders or
the secrets may change between an apply and a run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from firefeed.errors import SpecError, UnsafePathError, UnsafeURLError

if TYPE_CHECKING:
    from firefeed.config import Settings
    from firefeed.spec.model import FeedSpec, ProjectSpec


def check_server_side(
    spec: ProjectSpec, spec_dir: Path | None, settings: Settings, secret_names: Callable[[str], Iterable[str]]
) -> None:
    """SpecError listing every local path outside the allowed folders and every secret the company lacks."""
    from firefeed.pipeline._netguard import resolve_local_path, url_kind
    from firefeed.pipeline.steps import fetch_settings
    from firefeed.secrets.references import Kind, find_references
    from firefeed.spec.paths import join_key
    from firefeed.suggest import did_you_mean

    allowed = fetch_settings(settings, spec.company, spec_dir)
    feeds: list[tuple[str, FeedSpec]] = [(f"sources[{i}]", s) for i, s in enumerate(spec.sources)]
    feeds += [(f"lookups[{i}]", lk) for i, lk in enumerate(spec.lookups) if not lk.inline]  # rows: no file
    problems: list[SpecError] = []
    have: set[str] | None = None
    # SPEC 10 C7: a delivery target's secrets are checked as a source's are; it has no local path.
    from firefeed.spec.delivery import DeliveryTarget

    places_of: list[tuple[str, FeedSpec | DeliveryTarget]] = [*feeds]
    places_of += [
        (f"exports[{i}].deliver[{j}]", t) for i, e in enumerate(spec.exports) for j, t in enumerate(e.deliver)
    ]
    for where, feed in places_of:
        places = [(f"{where}.url", feed.url)] + [(join_key(f"{where}.headers", k), v) for k, v in feed.headers.items()]
        places += [
            (f"{where}.{k}", v) for k, v in (("password", feed.password), ("private_key", feed.private_key)) if v
        ]
        for path, text in places:
            try:
                refs = [r for r in find_references(str(text)) if r.kind is Kind.SECRET]
            except ValueError:
                refs = []  # a malformed reference was already refused, naming its key (secrets/references.py)
            for ref in refs:
                have = set(secret_names(spec.company)) if have is None else have
                if ref.name not in have:
                    hint = did_you_mean(ref.name, have)
                    problems.append(
                        SpecError(
                            path,
                            f"company {spec.company!r} has no secret {ref.name!r}{hint}: set it with "
                            f"`firefeed secret set --company {spec.company} {ref.name}` or PUT /api/secrets/{ref.name}",
                        )
                    )
        url = feed.url
        if isinstance(feed, DeliveryTarget) or "${" in url:
            continue  # a path made by a reference is checked at FETCH, once it is known
        try:
            if url_kind(feed.name, url) != "file":
                continue
            resolve_local_path(feed.name, url, base_dir=spec_dir, settings=allowed)
        except (UnsafePathError, UnsafeURLError) as err:
            folders = _folders(spec_dir, allowed)
            problems.append(SpecError(f"{where}.url", f"{err.reason}; {folders}" if folders else err.reason))
    for i, export in enumerate(spec.exports):  # SPEC 10 C4: a feed URL's password is a secret the company has
        if export.feed_auth is None:
            continue
        name = export.feed_auth.secret_name
        have = set(secret_names(spec.company)) if have is None else have
        if name not in have:
            problems.append(
                SpecError(
                    f"exports[{i}].feed_auth.password",
                    f"company {spec.company!r} has no secret {name!r}{did_you_mean(name, have)}: set it with "
                    f"`firefeed secret set --company {spec.company} {name}` or PUT /api/secrets/{name}",
                )
            )
    for i, export in enumerate(spec.exports):  # SPEC 10 C9: a sync's credentials are a secret the company has
        if export.sync is None:
            continue
        name = export.sync.secret_name
        have = set(secret_names(spec.company)) if have is None else have
        if name not in have:
            key = "credentials" if export.sync.to == "google-merchant" else "token"
            problems.append(
                SpecError(
                    f"exports[{i}].sync.{key}",
                    f"company {spec.company!r} has no secret {name!r}{did_you_mean(name, have)}: set it with "
                    f"`firefeed secret set --company {spec.company} {name}` or PUT /api/secrets/{name}",
                )
            )
    if spec.alerts:
        from firefeed.alerts.spec import check_alerts

        try:
            check_alerts(spec.alerts, spec.company, settings, secret_names(spec.company))
        except SpecError as err:
            problems.append(err)
    if problems:
        raise SpecError.of(problems)


def _folders(spec_dir: Path | None, settings: Settings) -> str:
    """The folders a local source may be read from, said with the setting that adds one."""
    roots = [str(r.resolve()) for r in (spec_dir, settings.local_sources_root) if r is not None]
    if not roots:
        return ""  # the reason already says to set FIREFEED_LOCAL_SOURCES_ROOT
    if spec_dir is None:
        return f"allowed folder: {roots[0]} (the company's folder under FIREFEED_LOCAL_SOURCES_ROOT)"
    return f"allowed folders: {', '.join(roots)} (the spec's folder, and FIREFEED_LOCAL_SOURCES_ROOT when set)"
