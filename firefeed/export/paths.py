"""Where an export file goes, and the guarantee that it stays in its project's folder.

The spec already rejects absolute paths and `..`; this is the second line of
defence, done on the real file system: a symlink inside the export folder that
points elsewhere must not let a feed overwrite files outside it. `export_key`
does the same for the storage layer (`firefeed.storage`), where an export is the
key `<company>/<project>/<path>` on a local folder or in a bucket.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from firefeed.errors import UnsafePathError
from firefeed.schema.identifiers import check_company_id, check_project_id
from firefeed.storage.base import Storage

GZIP_SUFFIX = ".gz"


def project_export_dir(export_dir: Path, company: str, project: str) -> Path:
    """export_dir/<company>/<project>; both ids are checked so neither can add a path part."""
    try:
        return Path(export_dir) / check_company_id(company) / check_project_id(project)
    except ValueError as exc:
        raise UnsafePathError(str(exc)) from exc


def resolve_export_path(export_dir: Path, company: str, project: str, rel_path: str, *, gzip: bool = False) -> Path:
    """The absolute file an export writes, resolved through any existing symlinks.

    With `gzip`, ".gz" is appended unless `rel_path` already ends with it, so a
    reader can tell from the name that the bytes are compressed (`feed.csv` ->
    `feed.csv.gz`; `feed.csv.gz` stays). Backslashes count as separators, as in
    the spec check. Raises UnsafePathError when the path is empty, absolute,
    has a `..` part, or lands outside export_dir/<company>/<project> (or on that
    folder itself) once symlinks of the parts that already exist are resolved.
    """
    base = project_export_dir(export_dir, company, project)
    text = written_path(rel_path, gzip=gzip)
    root = base.resolve()
    target = (root / text).resolve()
    if target == root or not target.is_relative_to(root):
        raise UnsafePathError(
            f"export path {rel_path!r} resolves to {target}, outside the project's export folder {root}"
        )
    return target


#: the longest name of one folder or file of an export path, in UTF-8 bytes: the file system's 255 less
#: what a run adds while it writes (`.<name>.<run id>.partial`, then a temporary's own affixes)
MAX_PATH_PART_BYTES = 150
#: the longest export path, in UTF-8 bytes
MAX_PATH_BYTES = 1024


def path_length_problem(rel_path: str) -> str | None:
    """Why an export path is too long to write (a folder or file name, or the whole), else None."""
    if len(rel_path.encode("utf-8")) > MAX_PATH_BYTES:
        return f"is longer than {MAX_PATH_BYTES} bytes"
    for part in rel_path.replace("\\", "/").split("/"):
        if len(part.encode("utf-8")) > MAX_PATH_PART_BYTES:
            return f"has a name longer than {MAX_PATH_PART_BYTES} bytes ({part[:20]!r}...): shorten it"
    return None


def written_path(rel_path: str, *, gzip: bool) -> str:
    """The file an export path writes, relative to the project's folder: `/`-separated, with ".gz" added for
    `gzip`; UnsafePathError when it is absolute, empty, climbs with `..` or names a folder."""
    text = rel_path.replace("\\", "/")
    pure = PurePosixPath(text)
    if (
        not text.strip()
        or "\x00" in text
        or pure.is_absolute()
        or text.startswith("~")
        or ".." in pure.parts
        or (len(text) > 1 and text[1] == ":")
    ):
        raise UnsafePathError(f"export path {rel_path!r} must be relative to the project's export folder")
    too_long = path_length_problem(text)
    if too_long is not None:
        raise UnsafePathError(f"export path {too_long}")
    if text.rsplit("/", 1)[-1] in ("", "."):
        # `sub/` would otherwise write a file named `sub` (the spec refuses it already: a stored run's may not)
        raise UnsafePathError(f"export path {rel_path!r} names a folder, not a file in the project's export folder")
    if gzip and not text.endswith(GZIP_SUFFIX):
        text += GZIP_SUFFIX
    return text


def project_prefix(company: str, project: str) -> str:
    """`<company>/<project>`: the storage prefix of a project's exports; both ids are checked."""
    try:
        return f"{check_company_id(company)}/{check_project_id(project)}"
    except ValueError as exc:
        raise UnsafePathError(str(exc)) from exc


def export_key(storage: Storage, company: str, project: str, rel_path: str, *, gzip: bool = False) -> str:
    """The storage key of an export, `<company>/<project>/<path>`, with the checks of `resolve_export_path`.

    The path is checked as text first, then where it really lands in `storage`
    (a local folder follows its symlinks): anything outside the project's prefix
    is an UnsafePathError naming the export path.
    """
    prefix = project_prefix(company, project)
    normal = PurePosixPath(written_path(rel_path, gzip=gzip)).as_posix()
    if normal in ("", "."):
        raise UnsafePathError(f"export path {rel_path!r} must name a file in the project's export folder")
    key = f"{prefix}/{normal}"
    if not storage.is_within(key, prefix):
        raise UnsafePathError(
            f"export path {rel_path!r} resolves to {storage.url(key)}, "
            f"outside the project's export folder {storage.url(prefix)}"
        )
    return key
