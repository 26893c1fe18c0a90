"""`${secret:NAME}` and `${VAR}`: parsing, the origin rules, expansion, and hiding values again."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from firefeed.errors import FetchError, SpecError
from firefeed.secrets.references import (
    Kind,
    Resolver,
    SpecOrigin,
    check_spec,
    env_allowed,
    find_references,
    origin_of,
)
from firefeed.spec.loader import parse_spec

VALUE = "v4lue-of-the-secret"


def spec_with(url: str = "https://feeds.example.com/f.csv", **headers: str) -> Any:
    return parse_spec(
        {
            "company": "acme",
            "project": "p",
            "sources": [{"name": "main", "url": url, "format": "csv", "headers": headers}],
        }
    )


def secrets_of(values: dict[str, str]) -> Resolver:
    return Resolver(company="acme", origin=SpecOrigin.REMOTE, secret=values.get)


# -- parsing


def test_references_are_found_with_their_kind_and_name() -> None:
    refs = find_references("Bearer ${secret:SHOP_TOKEN} and ${HOME} and $NOT {this}")
    assert [(r.kind, r.name, r.text) for r in refs] == [
        (Kind.SECRET, "SHOP_TOKEN", "${secret:SHOP_TOKEN}"),
        (Kind.ENV, "HOME", "${HOME}"),
    ]


@pytest.mark.parametrize("text", ["${}", "${secret:}", "${secret:1abc}", "${a b}", "${secret:a-b}", "${x:y}"])
def test_a_malformed_reference_is_named(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a (secret )?reference") as err:
        find_references(f"x {text} y")
    assert text in str(err.value)


@pytest.mark.parametrize(
    ("name", "allow", "expected"),
    [
        ("SHOP_TOKEN", "SHOP_TOKEN", True),
        ("SHOP_TOKEN", " OTHER , SHOP_TOKEN ", True),
        ("SHOP_TOKEN", "SHOP_*", True),
        ("SHOP_TOKEN", "SHOP", False),
        ("FIREFEED_DATABASE_URL", "SHOP_*", False),
        ("FIREFEED_DATABASE_URL", "", False),
        ("X", ",,", False),
    ],
)
def test_the_allow_list_takes_names_and_prefixes(name: str, allow: str, expected: bool) -> None:
    assert env_allowed(name, allow) is expected


def test_a_spec_with_a_folder_came_from_the_cli_and_one_without_from_afar(tmp_path: Path) -> None:
    assert origin_of(tmp_path) is SpecOrigin.CLI
    assert origin_of(str(tmp_path)) is SpecOrigin.CLI
    assert origin_of(None) is SpecOrigin.REMOTE


# -- checks when a spec is applied


def test_an_api_spec_may_not_name_an_environment_variable_and_the_error_names_the_key() -> None:
    spec = spec_with(**{"X-Db": "${FIREFEED_DATABASE_URL}"})
    with pytest.raises(SpecError) as err:
        check_spec(spec, SpecOrigin.REMOTE, "FIREFEED_*")
    assert err.value.path == "sources[0].headers.X-Db"
    assert "environment variables can't be used in specs sent over the API" in err.value.detail
    assert "${secret:NAME}" in err.value.detail


def test_an_api_spec_may_not_name_an_environment_variable_in_its_url() -> None:
    with pytest.raises(SpecError) as err:
        check_spec(spec_with(url="https://x.example.com/f.csv?k=${HOME}"), SpecOrigin.REMOTE, "")
    assert err.value.path == "sources[0].url"


def test_a_header_name_with_a_dot_is_quoted_in_the_key_path() -> None:
    with pytest.raises(SpecError) as err:
        check_spec(spec_with(**{"X.Db": "${HOME}"}), SpecOrigin.REMOTE, "")
    assert err.value.path == 'sources[0].headers["X.Db"]'


def test_a_cli_spec_may_name_only_allowed_variables_and_the_message_is_the_same_set_or_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_spec(spec_with(Authorization="Bearer ${SHOP_TOKEN}"), SpecOrigin.CLI, "SHOP_*")
    monkeypatch.setenv("FIREFEED_SET_VARIABLE", "x")
    monkeypatch.delenv("FIREFEED_UNSET_VARIABLE", raising=False)
    messages = []
    for var in ("FIREFEED_SET_VARIABLE", "FIREFEED_UNSET_VARIABLE"):
        with pytest.raises(SpecError) as err:
            check_spec(spec_with(Authorization=f"${{{var}}}"), SpecOrigin.CLI, "SHOP_*")
        messages.append(err.value.detail.replace(var, "VAR"))
    assert messages[0] == messages[1]


def test_secrets_pass_the_check_from_every_origin() -> None:
    spec = spec_with(url="https://x.example.com/${secret:SHOP}/f.csv", Authorization="Bearer ${secret:TOKEN}")
    check_spec(spec, SpecOrigin.REMOTE, "")
    check_spec(spec, SpecOrigin.CLI, "")


def test_a_malformed_reference_in_a_spec_is_a_spec_error_naming_the_key() -> None:
    with pytest.raises(SpecError) as err:
        check_spec(spec_with(Authorization="${secret:}"), SpecOrigin.CLI, "")
    assert err.value.path == "sources[0].headers.Authorization"


# -- hop-by-hop headers in the spec


@pytest.mark.parametrize(
    "name",
    [
        "Host",
        "host",
        "Content-Length",
        "TRANSFER-ENCODING",
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Upgrade",
    ],
)
def test_a_source_may_not_set_a_framing_or_hop_by_hop_header(name: str) -> None:
    with pytest.raises(SpecError) as err:
        spec_with(**{name: "x"})
    assert err.value.path == "sources[0].headers"
    assert repr(name) in err.value.detail


def test_ordinary_headers_are_still_accepted() -> None:
    spec = spec_with(Authorization="Bearer x", Accept="text/csv", **{"X-Api-Key": "k", "User-Agent": "me"})
    assert set(spec.sources[0].headers) == {"Authorization", "Accept", "X-Api-Key", "User-Agent"}


# -- expanding at fetch time


def test_a_secret_is_expanded_in_a_header_as_is_and_in_a_url_percent_encoded() -> None:
    refs = secrets_of({"TOKEN": "a/b?c&d=e f"})
    assert refs.expand("Bearer ${secret:TOKEN}", source="s", where="header 'A'") == "Bearer a/b?c&d=e f"
    url = refs.expand("https://x.example.com/f.csv?k=${secret:TOKEN}", source="s", where="the URL", in_url=True)
    assert url == "https://x.example.com/f.csv?k=a%2Fb%3Fc%26d%3De%20f"
    assert httpx.URL(url).host == "x.example.com"


def test_an_unknown_secret_names_the_company_and_how_to_set_it() -> None:
    with pytest.raises(FetchError, match=r"\$\{secret:NOPE\}, which company 'acme' has not set"):
        secrets_of({}).expand("${secret:NOPE}", source="s", where="header 'A'")


def test_a_value_is_not_expanded_twice() -> None:
    refs = Resolver(company="acme", origin=SpecOrigin.CLI, env_allow="*", secret={"T": "${HOME}"}.get)
    assert refs.expand("${secret:T}", source="s", where="header 'A'") == "${HOME}"


def test_the_closed_resolver_expands_nothing() -> None:
    with pytest.raises(FetchError, match="no company's secrets are available"):
        Resolver.closed().expand("${secret:T}", source="s", where="header 'A'")
    with pytest.raises(FetchError, match="environment variables can't be used"):
        Resolver.closed().expand("${HOME}", source="s", where="header 'A'")


def test_at_fetch_time_an_unset_and_a_forbidden_variable_get_the_same_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFEED_SET_VARIABLE", "x")
    monkeypatch.delenv("SHOP_UNSET", raising=False)
    refs = Resolver(company="acme", origin=SpecOrigin.CLI, env_allow="SHOP_*")
    messages = []
    for var in ("FIREFEED_SET_VARIABLE", "SHOP_UNSET"):
        with pytest.raises(FetchError) as err:
            refs.expand(f"${{{var}}}", source="s", where="header 'A'")
        messages.append(str(err.value).replace(var, "VAR"))
    assert messages[0] == messages[1]


def test_an_allowed_variable_is_read_in_a_cli_spec_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP_TOKEN", VALUE)
    cli = Resolver(company="acme", origin=SpecOrigin.CLI, env_allow="SHOP_*")
    assert cli.expand("${SHOP_TOKEN}", source="s", where="header 'A'") == VALUE
    remote = Resolver(company="acme", origin=SpecOrigin.REMOTE, env_allow="SHOP_*")
    with pytest.raises(FetchError, match="environment variables can't be used"):
        remote.expand("${SHOP_TOKEN}", source="s", where="header 'A'")


# -- hiding values again


def test_mask_replaces_each_value_and_its_url_form_by_its_reference() -> None:
    refs = secrets_of({"TOKEN": "a/b c", "K": VALUE})
    refs.expand("${secret:TOKEN} ${secret:K}", source="s", where="the URL", in_url=True)
    text = f"failed: http://h/?t=a%2Fb%20c&k={VALUE} and a/b c"
    assert refs.mask(text) == "failed: http://h/?t=${secret:TOKEN}&k=${secret:K} and ${secret:TOKEN}"


def test_scrub_hides_values_in_an_error_and_drops_a_cause_that_quotes_one() -> None:
    refs = secrets_of({"K": VALUE})
    refs.expand("${secret:K}", source="s", where="the URL", in_url=True)
    try:
        try:
            raise ValueError(f"bad url http://h/?k={VALUE}")
        except ValueError as inner:
            raise FetchError("s", f"invalid URL http://h/?k={VALUE}") from inner
    except FetchError as err:
        refs.scrub(err)
        caught = err
    assert VALUE not in str(caught)
    assert "${secret:K}" in str(caught)
    assert caught.__cause__ is None and caught.__context__ is None


def test_while_hiding_the_http_librarys_log_lines_do_not_show_a_value(caplog: pytest.LogCaptureFixture) -> None:
    refs = secrets_of({"K": VALUE})
    refs.expand("${secret:K}", source="s", where="the URL", in_url=True)
    caplog.set_level(logging.DEBUG)
    with refs.hiding():
        logging.getLogger("httpx").info("HTTP Request: GET %s", f"http://h/?k={VALUE}")
    logging.getLogger("httpx").info("after: %s", "plain")
    assert VALUE not in caplog.text
    assert "k=${secret:K}" in caplog.text
    assert "after: plain" in caplog.text
