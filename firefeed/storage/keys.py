"""Storage keys: where a run's files live, whatever the backend.

A key is a relative, `/`-separated path (`acme/shoes_it/google.xml`). The same
key names the same file on a local folder and in a bucket, so the layout is one
set of rules here:

- exports area: `<company>/<project>/<path>` (see `firefeed.export.paths.export_key`),
  and `<company>/<project>/<dir>/.<name>.<run>.partial` while a run has written but
  not yet published it;
- runs area: `<run_id>/fetch/<folder>/<file>` for a source's raw download, all of
  it under `<run_id>/` so one delete removes a run's files.
"""

from __future__ import annotations

from firefeed.errors import UnsafePathError


def check_key(key: str) -> str:
    """`key` if it is a safe relative key; UnsafePathError naming it otherwise.

    Refused: empty, absolute, backslashes, NUL, and empty, `.` or `..` parts, so a
    key can never address anything outside its storage's root.
    """
    if not isinstance(key, str) or not key or key.startswith("/") or "\x00" in key or "\\" in key:
        raise UnsafePathError(f"storage key {key!r} must be a non-empty relative path with '/' separators")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise UnsafePathError(f"storage key {key!r} has an empty, '.' or '..' part")
    return key


def join(*parts: str) -> str:
    """Keys joined with `/`, checked."""
    return check_key("/".join(p.strip("/") for p in parts if p))


def partial_key(key: str, run_id: str) -> str:
    """Where a run writes an export before publishing it: a hidden name beside the final one."""
    head, _, name = check_key(key).rpartition("/")
    hidden = f".{name}.{run_id[:8]}.partial"
    return f"{head}/{hidden}" if head else hidden


def run_prefix(run_id: str) -> str:
    """Everything one run keeps in the runs area is under this prefix."""
    return check_key(run_id)


def download_key(run_id: str, folder: str, filename: str) -> str:
    """A source's raw download: `<run_id>/fetch/<folder>/<filename>` (folder: one per source)."""
    return join(run_prefix(run_id), "fetch", folder, filename)
