"""An export's `sync:` as the spec reads it (SPEC 10 C9): the two targets, secrets by reference only, keys named."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.errors import SpecError
from firefeed.spec.loader import parse_spec
from firefeed.spec.sync import GoogleMerchantSync, MetaCatalogSync

GOOGLE = {
    "to": "google-merchant",
    "account": "123",
    "data_source": "456",
    "content_language": "it",
    "feed_label": "IT",
    "credentials": "${secret:GSA}",
}


def spec(sync: dict[str, Any], **export: Any) -> Any:
    doc = {
        "company": "acme",
        "project": "p1",
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "g", "format": "google-xml", "path": "g.xml", "sync": sync, **export}],
    }
    return parse_spec(doc)


def problems(sync: dict[str, Any], **export: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        spec(sync, **export)
    return [p.message for p in caught.value.problems]  # "exports[0].sync.KEY: what is wrong"


def test_both_targets_are_read_with_their_lock_and_ledger_keys() -> None:
    google = spec(GOOGLE).exports[0].sync
    assert isinstance(google, GoogleMerchantSync) and google.secret_name == "GSA"
    assert google.account_key == "google-merchant:123"
    assert google.ledger_key == "google-merchant:123/456/it/IT"
    meta = spec({"to": "meta-catalog", "catalog": "789", "token": "${secret:META}"}, format="csv", channel="meta")
    assert isinstance(meta.exports[0].sync, MetaCatalogSync) and meta.exports[0].sync.secret_name == "META"


def test_a_literal_credential_or_token_is_refused_naming_its_key() -> None:
    found = problems({**GOOGLE, "credentials": '{"type": "service_account"}'})
    assert found == [
        'exports[0].sync.credentials: must name a company secret, "${secret:NAME}", never hold the value itself'
    ]
    found = problems({"to": "meta-catalog", "catalog": "789", "token": "EAAB..."}, format="csv", channel="meta")
    assert found[0].startswith("exports[0].sync.token: must name a company secret")


def test_unknown_keys_a_wrong_target_and_a_channel_that_cannot_map_the_columns_are_refused() -> None:
    assert problems({**GOOGLE, "acount": "1"}) == ["exports[0].sync.acount: unknown key (did you mean 'account'?)"]
    assert problems({**GOOGLE, "to": "pinterest"}) == [
        "exports[0].sync: `to` must be one of google-merchant, meta-catalog"
    ]
    found = problems({"to": "meta-catalog", "catalog": "789", "token": "${secret:M}"})  # google-xml: channel google
    assert found == [
        "exports[0].sync.to: meta-catalog takes the columns of the meta channel: set channel: meta on the export "
        "(its items are checked and mapped by the meta rules)"
    ]
    assert problems({**GOOGLE, "account": "12a"})[0].startswith("exports[0].sync.account:")
