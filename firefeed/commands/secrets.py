"""`firefeed secret set|list|delete --company C`, and `firefeed secret keygen` for FIREFEED_SECRETS_KEY.

A value is read from --value-file, from stdin when it is not a terminal, or from
a prompt that does not echo: never from the command line, where it would land
in the shell history and in every `ps` listing.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def _err(message: str) -> None:
    print(f"firefeed: {message}", file=sys.stderr)


def _one_line(text: str) -> str:
    """The value without the one line break that ends a file or a piped `echo`."""
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


def read_value(args: argparse.Namespace) -> str:
    if args.value_file:
        try:
            return _one_line(Path(args.value_file).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
            raise ValueError(f"cannot read --value-file {args.value_file}: {reason}") from None
    if not sys.stdin.isatty():
        return _one_line(sys.stdin.read())
    return getpass.getpass(f"value of secret {args.name} (not shown): ")


def cmd_secret_set(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.config import get_settings
    from firefeed.errors import CompanyLimitError
    from firefeed.secrets.crypto import SecretCipher
    from firefeed.secrets.store import SecretStore, check_name, check_value

    SecretCipher.from_settings(get_settings())  # no key: say so before asking for the value
    try:
        check_name(args.name)
        value = check_value(read_value(args))
    except ValueError as err:
        _err(str(err))
        return EXIT_BAD_INPUT
    ensure_migrated()
    try:
        created = SecretStore().set(args.company, args.name, value)
    except (ValueError, CompanyLimitError) as err:
        _err(str(err))
        return EXIT_BAD_INPUT
    print(
        f"{'created' if created else 'replaced'} secret {args.name} of company {args.company}; "
        f"specs of {args.company} use it as ${{secret:{args.name}}}"
    )
    return EXIT_OK


def cmd_secret_list(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.secrets.store import SecretStore

    ensure_migrated()
    found = SecretStore().list(args.company)
    if args.json:
        print(json.dumps([{"name": s.name, "updated_at": s.updated_at.isoformat()} for s in found], indent=2))
        return EXIT_OK
    if not found:
        print(f"company {args.company} has no secrets")
        return EXIT_OK
    width = max(len("name"), *(len(s.name) for s in found)) + 2  # as wide as the longest name, not the longest allowed
    print(f"{'name':<{width}}updated")
    for s in found:
        print(f"{s.name:<{width}}{s.updated_at.isoformat(timespec='seconds')}")
    return EXIT_OK


def cmd_secret_delete(args: argparse.Namespace) -> int:
    from firefeed.cli import ensure_migrated
    from firefeed.secrets.store import SecretStore

    ensure_migrated()
    SecretStore().delete(args.company, args.name)  # NotFoundError: exit 4, like any unknown object
    print(f"deleted secret {args.name} of company {args.company}")
    return EXIT_OK


def cmd_secret_keygen(args: argparse.Namespace) -> int:
    from firefeed.secrets.crypto import generate_key

    print(generate_key())
    print(
        "a new key for FIREFEED_SECRETS_KEY: keep it with your other server secrets; without it the stored "
        "secrets can't be read. To rotate, list it first and the old key after it, comma separated.",
        file=sys.stderr,
    )
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "secret",
        help="a company's secrets for ${secret:NAME} in its specs (set, list, delete; values are never shown)",
        description=(
            "Secrets are stored encrypted with FIREFEED_SECRETS_KEY and used as ${secret:NAME} in the source "
            "URLs and headers of the company's specs. No command shows a value: set it again to change it."
        ),
    )
    secret_sub = p.add_subparsers(dest="secret_command", required=True, metavar="ACTION")

    c = secret_sub.add_parser("set", help="create or replace a secret (value from --value-file, stdin or a prompt)")
    c.add_argument("--company", required=True, help="the company whose specs may use the secret")
    c.add_argument("name", metavar="NAME", help="letters, digits and _ (the NAME of ${secret:NAME})")
    c.add_argument("--value-file", metavar="PATH", help="read the value from this file (one trailing newline dropped)")
    c.set_defaults(func=cmd_secret_set)

    c = secret_sub.add_parser("list", help="the company's secret names and when each was last set")
    c.add_argument("--company", required=True)
    c.add_argument("--json", action="store_true", help="print the list as JSON")
    c.set_defaults(func=cmd_secret_list)

    c = secret_sub.add_parser("delete", help="forget a secret")
    c.add_argument("--company", required=True)
    c.add_argument("name", metavar="NAME")
    c.set_defaults(func=cmd_secret_delete)

    c = secret_sub.add_parser("keygen", help="print a new random key for FIREFEED_SECRETS_KEY")
    c.set_defaults(func=cmd_secret_keygen)
