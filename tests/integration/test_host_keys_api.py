"""/api/host-keys (SPEC 10 C6): a company lists, pins and forgets its SFTP host keys over the real API.

An asyncssh SFTP server on 127.0.0.1 shows that a key pinned over the API is the one a fetch then
accepts; another company's token sees nothing and gets the unknown host's 404 word for word.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
import yaml
from sqlalchemy import text

from firefeed.pipeline.transfer.host_keys import PINS_PER_COMPANY
from firefeed.runs.tokens import TokenStore
from tests.integration.conftest import cli, new_company
from tests.integration.file_servers import USER, SFTPServer, company_with

pytestmark = pytest.mark.integration


def key_line(key: asyncssh.SSHKey, port: int) -> str:
    return f"[127.0.0.1]:{port} " + key.export_public_key("openssh").decode().strip()


def fingerprint(key: asyncssh.SSHKey) -> str:
    return str(key.get_fingerprint("sha256"))


def run_from_sftp(tmp_path: Path, company: str, server: SFTPServer) -> dict[str, Any]:
    spec = {
        "company": company,
        "project": "p_" + uuid.uuid4().hex[:10],
        "sources": [
            {
                "name": "main",
                "format": "csv",
                "url": f"sftp://{USER}@127.0.0.1:{server.port}/out/feed.csv",
                "password": "${secret:SFTP_PW}",
            }
        ],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    path = tmp_path / f"{spec['project']}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    _code, out = cli("run", str(path), "--json")
    report: dict[str, Any] = json.loads(out)
    return report


@pytest.fixture()
def api(http: httpx.Client) -> Iterator[httpx.Client]:
    yield http


def test_a_key_pinned_over_the_api_is_the_only_one_a_fetch_accepts_and_forgetting_it_records_the_next(
    transfer_env: Path, tmp_path: Path, sftp: SFTPServer, api: httpx.Client
) -> None:
    company = company_with(SFTP_PW=sftp.password)
    auth = {"Authorization": f"Bearer {TokenStore().create(company)}"}
    address = f"127.0.0.1:{sftp.port}"
    other = asyncssh.generate_private_key("ssh-ed25519")

    pinned = api.put(f"/api/host-keys/{address}", json={"key": key_line(other, sftp.port)}, headers=auth)

    assert pinned.status_code == 201, pinned.text
    body = pinned.json()
    assert (body["host"], body["port"], body["address"], body["created"]) == ("127.0.0.1", sftp.port, address, True)
    assert body["fingerprint"] == fingerprint(other)
    report = run_from_sftp(tmp_path, company, sftp)
    assert report["status"] == "FAILED"
    message = report["error"]["message"]
    assert fingerprint(other) in message and fingerprint(sftp.host_key) in message, message
    assert sftp.opens == 0

    replaced = api.put(f"/api/host-keys/{address}", json={"key": key_line(sftp.host_key, sftp.port)}, headers=auth)
    assert (replaced.status_code, replaced.json()["created"]) == (200, False), replaced.text
    assert run_from_sftp(tmp_path, company, sftp)["status"] == "SUCCEEDED"

    listed = api.get("/api/host-keys", headers=auth).json()
    assert listed["company"] == company
    assert [(k["address"], k["fingerprint"]) for k in listed["host_keys"]] == [(address, fingerprint(sftp.host_key))]
    one = api.get(f"/api/host-keys/{address}", headers=auth).json()
    assert one == listed["host_keys"][0]
    assert one["public_key"] == sftp.host_key.export_public_key("openssh").decode().strip()
    code, out = cli("host-key", "list", company)  # the CLI sees the same key
    assert code == 0 and fingerprint(sftp.host_key) in out

    assert api.delete(f"/api/host-keys/{address}", headers=auth).status_code == 204
    gone = api.get(f"/api/host-keys/{address}", headers=auth)
    assert (gone.status_code, gone.json()["error"]) == (404, "not_found")
    assert api.delete(f"/api/host-keys/{address}", headers=auth).status_code == 404
    # Forgotten: the next fetch records the key the server presents, as after `firefeed host-key forget`.
    assert run_from_sftp(tmp_path, company, sftp)["status"] == "SUCCEEDED"
    assert [k["fingerprint"] for k in api.get("/api/host-keys", headers=auth).json()["host_keys"]] == [
        fingerprint(sftp.host_key)
    ]


def test_another_company_s_token_sees_no_key_and_every_answer_is_the_unknown_host_s_word_for_word(
    api: httpx.Client,
) -> None:
    owner, owner_auth = new_company()
    _other, other_auth = new_company()
    address = "files.example.com:2222"
    key = asyncssh.generate_private_key("ssh-ed25519")
    line = key.export_public_key("openssh").decode().strip()

    before = [
        (r.status_code, r.content)
        for r in (
            api.get(f"/api/host-keys/{address}", headers=other_auth),
            api.delete(f"/api/host-keys/{address}", headers=other_auth),
        )
    ]
    assert api.put(f"/api/host-keys/{address}", json={"key": line}, headers=owner_auth).status_code == 201
    after = [
        (r.status_code, r.content)
        for r in (
            api.get(f"/api/host-keys/{address}", headers=other_auth),
            api.delete(f"/api/host-keys/{address}", headers=other_auth),
        )
    ]

    assert after == before and [code for code, _ in after] == [404, 404]
    assert json.loads(after[0][1]) == {
        "error": "not_found",
        "message": "no host key is pinned for files.example.com:2222",
    }
    assert api.get("/api/host-keys", headers=other_auth).json()["host_keys"] == []
    # The other company pins its own key for the same address: the owner's stays as it was.
    mine = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().strip()
    assert api.put(f"/api/host-keys/{address}", json={"key": mine}, headers=other_auth).status_code == 201
    owned = api.get(f"/api/host-keys/{address}", headers=owner_auth).json()
    assert (owned["fingerprint"], owned["public_key"]) == (fingerprint(key), line)
    assert owner not in api.get("/api/host-keys", headers=other_auth).text
    for method in ("GET", "PUT", "DELETE"):
        assert api.request(method, f"/api/host-keys/{address}").status_code == 401
        assert api.request(method, "/api/host-keys/x", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_hosts_keys_and_bodies_are_bounded_and_a_company_holds_at_most_its_cap_of_pins(
    api: httpx.Client, engine: Any
) -> None:
    company, auth = new_company()
    line = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().strip()

    def put(host: str, body: Any = None, **kw: Any) -> httpx.Response:
        return api.put(f"/api/host-keys/{host}", json={"key": line} if body is None else body, headers=auth, **kw)

    for bad in ("bad%20host", "a:0", "a:99999", "[nope]:22", "x" * 300, "a;b", "%00"):
        r = put(bad)
        assert (r.status_code, r.json()["error"], r.json().get("path")) == (422, "invalid_request", "path.host"), (
            bad,
            r.text,
        )
        assert len(r.json()["message"]) < 160
    assert put("a%2Fb").status_code == 404  # a slash is no host: no route takes it
    assert api.get("/api/host-keys/" + "y" * 300, headers=auth).status_code == 422
    assert api.delete("/api/host-keys/a:0", headers=auth).status_code == 422

    for key in ("nonsense", "@cert-authority *.example.com " + line, "ssh-ed25519 AAAAnot-base64"):
        r = put("h.example", {"key": key})
        assert (r.status_code, r.json()["path"]) == (422, "body.key"), (key, r.text)
    assert put("h.example", {"key": "ssh-ed25519 " + "A" * 9000}).json()["path"] == "body.key"
    assert put("h.example", {"key": line, "comment": "x"}).status_code == 422
    assert put("h.example", {}).status_code == 422
    assert api.put("/api/host-keys/h.example", content=b"not json", headers=auth).status_code == 422
    assert put("h.example", {"key": line + " " + "x" * 20_000}).status_code == 413

    def trickle() -> Iterator[bytes]:  # no Content-Length: cut off once past the bound
        yield b'{"key": "'
        for _ in range(40):
            yield b"A" * 1024
        yield b'"}'

    assert api.put("/api/host-keys/h.example", content=trickle(), headers=auth).status_code == 413
    assert api.get("/api/host-keys", headers=auth).json()["host_keys"] == []
    # A host is kept as an sftp:// URL's: lower case, an internationalised name as written, IPv6 unbracketed.
    for given, kept in (("Bücher.Example:2222", ("bücher.example", 2222)), ("[::1]", ("::1", 22))):
        r = put(given)
        assert (r.status_code, (r.json()["host"], r.json()["port"])) == (201, kept), r.text
        assert api.delete(f"/api/host-keys/{r.json()['address']}", headers=auth).status_code == 204

    # The cap: one more host past PINS_PER_COMPANY is refused; replacing a pinned host's key is not.
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO host_keys (company_id, host, port, public_key, fingerprint) "
                "SELECT :c, 'h' || i || '.example', 22, 'k', 'f' FROM generate_series(1, :n) AS i"
            ),
            {"c": company, "n": PINS_PER_COMPANY},
        )
    refused = put("one-more.example")
    assert (refused.status_code, refused.json()["error"]) == (409, "company_limit"), refused.text
    assert str(PINS_PER_COMPANY) in refused.json()["message"]
    assert put("h1.example").status_code == 200
    assert len(api.get("/api/host-keys", headers=auth).json()["host_keys"]) == PINS_PER_COMPANY
