"""The Merchant API stand-in itself: a token only for a JWT its key signed, Google's error shapes, and the
process the sync bench starts (SPEC 10 C9-C10, #51)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import exceptions as auth_exceptions
from google.oauth2 import service_account

from firefeed.sync.google_merchant import SCOPE, _AuthRequest
from tests.ports import free_ports
from tests.standins.merchant_api import MerchantStandIn, decode_product_id, encode_product_id

ROOT = Path(__file__).resolve().parents[2]


def token_for(info: dict[str, str]) -> str:
    creds = service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])
    with httpx.Client() as http:
        creds.refresh(_AuthRequest(http))
    return str(creds.token)


def test_a_token_only_for_a_jwt_signed_by_the_service_accounts_key() -> None:
    with MerchantStandIn() as standin:
        info = standin.service_account_info()
        assert token_for(info).startswith("ya29.")
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        forged = other.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        with pytest.raises(auth_exceptions.RefreshError, match="invalid_grant"):
            token_for({**info, "private_key": forged})
        assert standin.tokens_issued == 1


def test_names_plain_and_encoded_are_the_same_product() -> None:
    assert decode_product_id("en~US~sku123") == ("en", "US", "sku123")
    assert decode_product_id(encode_product_id("en", "US", "sku/1~2")) == ("en", "US", "sku/1~2")


def test_the_stand_in_runs_alone_for_the_bench(tmp_path: Path) -> None:
    port = free_ports()
    key_file = tmp_path / "sa.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.standins.merchant_api",
            "--port",
            str(port),
            "--per-minute",
            "2",
            "--service-account-out",
            str(key_file),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"ready http://127.0.0.1:{port}"
        info = json.loads(key_file.read_text())
        assert info["token_uri"] == f"http://127.0.0.1:{port}/token"
        token = token_for(info)
        url = f"http://127.0.0.1:{port}/products/v1/accounts/1/products"
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}) as http:
            assert http.get(url).status_code == 200
            assert http.get(url).status_code == 200
            over = http.get(url)
            stats = http.get(f"http://127.0.0.1:{port}/_standin/stats").json()
        assert over.status_code == 429
        error = over.json()["error"]
        assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
        assert error["details"][0]["reason"] == "quota/request_rate_too_high"
        assert stats["by_status"] == {"200": 3, "429": 1} and stats["max_in_window"] == 2
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
