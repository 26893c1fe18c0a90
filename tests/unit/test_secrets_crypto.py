"""Secret values at rest: AES-GCM under the operator's key, bound to company and name."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.fernet import Fernet

from firefeed.config import Settings
from firefeed.errors import ConfigError
from firefeed.secrets.crypto import SecretCipher, generate_key, parse_keys

VALUE = "tok-9f8e7d6c5b4a"


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_a_value_comes_back_and_the_stored_form_does_not_hold_it() -> None:
    cipher = SecretCipher(parse_keys(generate_key()))
    stored = cipher.encrypt("acme", "SHOP_TOKEN", VALUE)
    assert VALUE not in stored
    assert stored.startswith("v1.")
    assert cipher.decrypt("acme", "SHOP_TOKEN", stored) == VALUE


def test_the_same_value_encrypts_differently_each_time() -> None:
    cipher = SecretCipher(parse_keys(generate_key()))
    assert cipher.encrypt("acme", "T", VALUE) != cipher.encrypt("acme", "T", VALUE)


@pytest.mark.parametrize(("company", "name"), [("other", "SHOP_TOKEN"), ("acme", "OTHER_NAME")])
def test_a_stored_value_copied_to_another_company_or_name_does_not_decrypt(company: str, name: str) -> None:
    cipher = SecretCipher(parse_keys(generate_key()))
    stored = cipher.encrypt("acme", "SHOP_TOKEN", VALUE)
    with pytest.raises(ConfigError, match="cannot be decrypted"):
        cipher.decrypt(company, name, stored)


def test_a_rotated_key_list_encrypts_with_the_first_and_reads_with_any() -> None:
    old, new = generate_key(), generate_key()
    stored_under_old = SecretCipher(parse_keys(old)).encrypt("acme", "T", VALUE)
    rotating = SecretCipher(parse_keys(f"{new}, {old}"))
    assert rotating.decrypt("acme", "T", stored_under_old) == VALUE
    stored_now = rotating.encrypt("acme", "T", VALUE)
    assert SecretCipher(parse_keys(new)).decrypt("acme", "T", stored_now) == VALUE
    with pytest.raises(ConfigError, match="FIREFEED_SECRETS_KEY"):
        SecretCipher(parse_keys(new)).decrypt("acme", "T", stored_under_old)


def test_a_fernet_key_is_accepted_as_a_key() -> None:
    cipher = SecretCipher(parse_keys(Fernet.generate_key().decode()))
    assert cipher.decrypt("acme", "T", cipher.encrypt("acme", "T", VALUE)) == VALUE


@pytest.mark.parametrize(
    "text",
    # The short key's id is fixed: every pytest-xdist worker must collect the same test ids.
    ["correct horse battery staple", "c2hvcnQ=", "", " , ", pytest.param(generate_key()[:-4], id="short-key")],
)
def test_a_passphrase_or_a_short_key_is_refused_naming_the_variable_but_not_the_text(text: str) -> None:
    with pytest.raises(ConfigError, match="FIREFEED_SECRETS_KEY") as err:
        parse_keys(text)
    if text.strip(" ,"):
        assert text not in str(err.value)


def test_without_a_key_the_cipher_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="FIREFEED_SECRETS_KEY is not set"):
        SecretCipher.from_settings(settings(secrets_key=None))
    with pytest.raises(ConfigError, match="FIREFEED_SECRETS_KEY is not set"):
        SecretCipher.from_settings(settings(secrets_key="  "))


def test_a_damaged_stored_value_is_reported_without_its_text() -> None:
    cipher = SecretCipher(parse_keys(generate_key()))
    with pytest.raises(ConfigError, match="damaged"):
        cipher.decrypt("acme", "T", "v0.garbage")
