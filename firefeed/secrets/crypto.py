"""Secret values at rest: AES-256-GCM under the operator's FIREFEED_SECRETS_KEY.

AES-GCM rather than Fernet because the ciphertext is bound to its company and
name (associated data): a row copied to another company or name in the database
does not decrypt, so nobody with write access to the table can make one
company's spec send another company's secret.

The key is given, not derived: FIREFEED_SECRETS_KEY holds one or more keys,
comma separated, each 32 random bytes in URL-safe base64 (44 characters;
`firefeed secret keygen` prints one, and a Fernet key has the same form). The
first key encrypts; every key is tried to decrypt, so a key is rotated by putting
the new one first, setting the secrets again, then dropping the old one. A
passphrase is refused rather than stretched: a KDF cannot add entropy a typed
word lacks, and a mistyped key must fail loudly, not become a different key.
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from firefeed.config import Settings
from firefeed.errors import ConfigError

KEY_BYTES = 32
_NONCE_BYTES = 12
# The stored form names its scheme, so another one can be added without guessing at old rows.
_SCHEME = "v1."
_KEY_HELP = (
    "FIREFEED_SECRETS_KEY must be one or more keys, comma separated, each 32 random bytes in URL-safe "
    "base64 (44 characters); `firefeed secret keygen` prints a new one"
)


def generate_key() -> str:
    """A new random key in the form FIREFEED_SECRETS_KEY takes."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def parse_keys(text: str) -> list[bytes]:
    """The keys of a FIREFEED_SECRETS_KEY value, first (the encrypting one) first; ConfigError if malformed."""
    keys: list[bytes] = []
    for position, part in enumerate(p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            key = base64.urlsafe_b64decode(part.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            key = b""
        if len(key) != KEY_BYTES:
            # Which key is wrong, never the key itself: it is the one secret that opens every other.
            raise ConfigError(f"key {position + 1} of FIREFEED_SECRETS_KEY is not a key. {_KEY_HELP}")
        keys.append(key)
    if not keys:
        raise ConfigError(_KEY_HELP)
    return keys


def _bound_to(company: str, name: str) -> bytes:
    return f"firefeed-secret\x00{company}\x00{name}".encode()


class SecretCipher:
    """Encrypts and decrypts one company's named secret with the operator's keys."""

    def __init__(self, keys: list[bytes]) -> None:
        if not keys:
            raise ConfigError(_KEY_HELP)
        self._keys = [AESGCM(k) for k in keys]

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretCipher:
        """The cipher of FIREFEED_SECRETS_KEY; ConfigError naming the variable when it is unset or malformed."""
        if settings.secrets_key is None:
            raise ConfigError(
                "FIREFEED_SECRETS_KEY is not set: secrets are stored encrypted with a key the operator "
                "provides; `firefeed secret keygen` prints one to put in FIREFEED_SECRETS_KEY"
            )
        return cls(parse_keys(settings.secrets_key))

    def encrypt(self, company: str, name: str, value: str) -> str:
        """The stored form of `value`: scheme, then base64 of nonce and ciphertext."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._keys[0].encrypt(nonce, value.encode("utf-8"), _bound_to(company, name))
        return _SCHEME + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def decrypt(self, company: str, name: str, stored: str) -> str:
        """The value of a stored secret; ConfigError when no key of FIREFEED_SECRETS_KEY opens it."""
        try:
            if not stored.startswith(_SCHEME):
                raise ValueError(stored[:3])
            blob = base64.urlsafe_b64decode(stored[len(_SCHEME) :].encode("ascii"))
        except (binascii.Error, ValueError):
            raise ConfigError(f"the stored secret {name!r} of company {company!r} is damaged") from None
        nonce, sealed = blob[:_NONCE_BYTES], blob[_NONCE_BYTES:]
        for key in self._keys:
            try:
                return key.decrypt(nonce, sealed, _bound_to(company, name)).decode("utf-8")
            except InvalidTag:
                continue
        raise ConfigError(
            f"the secret {name!r} of company {company!r} cannot be decrypted with FIREFEED_SECRETS_KEY: it was "
            "set under another key (list the old key after the new one, comma separated, while rotating)"
        )
