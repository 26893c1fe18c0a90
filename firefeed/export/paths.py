"""Where an export file goes, and the guarantee that it stays in its project's folder.

The spec already rejects absolute paths and `..`; this is the second line of
defence, done on the real file system: a symlink inside the export folder that
points elsewhere must not let a feed overwrite files outside it.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from firefeed.errors import UnsafePathError
from firefeed.schema.identifiers import check_company_id, check_project_id

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
    if gzip and not text.endswith(GZIP_SUFFIX):
        text += GZIP_SUFFIX
    root = base.resolve()
    target = (root / text).resolve()
    if target == root or not target.is_relative_to(root):
        raise UnsafePathError(
            f"export path {rel_path!r} resolves to {target}, outside the project's export folder {root}"
        )
    return target
