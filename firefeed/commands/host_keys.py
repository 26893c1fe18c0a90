"""`firefeed host-key list|forget COMPANY ...`: the SFTP host keys pinned at a company's first fetch (SPEC 10 C6).

The company itself reaches the same keys through the API (`/api/host-keys`, firefeed/api/routes/host_keys.py).

Forgetting a key is how a person accepts a server's new one: the next fetch records whatever key
the server presents then, so do it only once the server's owner confirmed the change.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def cmd_host_key_list(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.db.engine import get_engine
    from firefeed.pipeline.transfer.host_keys import HostKeyStore

    ensure_migrated()
    found = HostKeyStore(get_engine(), args.company).list()
    if args.json:
        rows = [
            {"host": k.host, "port": k.port, "fingerprint": k.fingerprint, "public_key": k.public_key,
             "recorded_at": k.created_at.isoformat()}
            for k in found
        ]  # fmt: skip
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not found:
        print(f"company {args.company} has no pinned host keys")
        return EXIT_OK
    for k in found:
        print(f"{k.host}:{k.port}  {k.fingerprint}  recorded {k.created_at.isoformat(timespec='seconds')}")
    return EXIT_OK


def cmd_host_key_forget(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.db.engine import get_engine
    from firefeed.errors import NotFoundError
    from firefeed.pipeline.transfer.host_keys import HostKeyStore, parse_host_port

    try:
        host, port = parse_host_port(args.host)
    except ValueError as err:
        print(f"firefeed: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    ensure_migrated()
    if not HostKeyStore(get_engine(), args.company).forget(host, port):
        raise NotFoundError(f"company {args.company} has no host key pinned for {host}:{port}")
    print(f"forgot the host key of {host}:{port} for company {args.company}; the next fetch records the new one")
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "host-key",
        help="SFTP host keys pinned at a company's first fetch (list, forget to accept a server's new key)",
    )
    sub = p.add_subparsers(dest="host_key_command", required=True, metavar="ACTION")

    c = sub.add_parser("list", help="the company's pinned SFTP host keys and their SHA256 fingerprints")
    c.add_argument("company", metavar="COMPANY")
    c.add_argument("--json", action="store_true", help="print the list as JSON")
    c.set_defaults(func=cmd_host_key_list)

    c = sub.add_parser("forget", help="forget a pinned key: the next fetch from HOST[:PORT] records the key it sees")
    c.add_argument("company", metavar="COMPANY")
    c.add_argument("host", metavar="HOST[:PORT]")
    c.set_defaults(func=cmd_host_key_forget)
