"""Checks that the lock files still match pyproject.toml (CI and `make lint` run it).

Every dependency pyproject.toml names must be pinned in the lock, at a version its specifier accepts,
with hashes: a dependency added or tightened without `tools/lock.sh` fails here, offline.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def pins(lock: Path) -> dict[str, Version]:
    found: dict[str, Version] = {}
    text = lock.read_text()
    for line in text.splitlines():
        m = PIN.match(line)
        if m:
            found[canonicalize_name(m.group(1))] = Version(m.group(2))
    if found and "--hash=sha256:" not in text:
        raise SystemExit(f"{lock.name}: no hashes (regenerate with tools/lock.sh)")
    return found


def problems(lock: Path, requirements: list[str]) -> list[str]:
    pinned = pins(lock)
    out = []
    for text in requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        version = pinned.get(name)
        if version is None:
            out.append(f"{lock.name}: {req.name} is in pyproject.toml but not locked")
        elif not req.specifier.contains(version, prereleases=True):
            out.append(f"{lock.name}: {req.name}=={version} does not satisfy {req.specifier}")
    return out


def main() -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = list(project["dependencies"])
    dev = runtime + list(project["optional-dependencies"]["dev"])
    found = problems(ROOT / "requirements.lock", runtime) + problems(ROOT / "requirements-dev.lock", dev)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print("the lock files do not match pyproject.toml: run tools/lock.sh", file=sys.stderr)
        return 1
    print("requirements.lock and requirements-dev.lock match pyproject.toml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
