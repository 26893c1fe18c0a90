"""The bytes a csv source's staging table was parsed from, kept in the data folder for the next parse (#52).

A changed csv feed is mostly the same records: the next PARSE diffs the kept bytes with the new file
(`pipeline/record_diff.py`) and stages only the changed records (`pipeline/stage_patch.py`), where a
full parse of the 1M-item feed costs 12-25 s. That is only sound when the kept file is exactly what
the staging table holds, so:

- PARSE copies the file first and parses the copy (`start`, then `commit`): the rows staged are the
  copy's bytes, whatever happens to a local source file meanwhile; the copy is written to a temporary
  name and renamed, so a kept file is never half written;
- its identity (`KeptCopy`: size, the sha256 the parse recorded, and its stat as renamed) goes into the
  source's `staged_stats`, written by the same parse; a later run trusts the file only when that row says
  the staging is whole (its parse signature set) and the file's stat is the one recorded (an edit or a
  replacement changes the ctime or the inode, which no user can set back);
- a parse that keeps no copy removes the one kept before (`drop`), and a source or project the spec no
  longer names loses its file with its staging table (`drop_unnamed`);
- the copy is only an optimisation for the next run: one that cannot be written is dropped and the file
  parsed in place; a parse a patch would refuse (`stage_patch.stats_reason`: malformed rows, warnings, not
  UTF-8) keeps none; a copy of a file that moved since FETCH hashed it is kept under its own digest
  (`steps/parse._Copy.read_as_hashed`); temporaries of killed runs are removed by the next copy (`start`).

Files live at `<data_dir>/parsed/<company schema>/<project>/<staging table>`: every part is a checked id
or a name derived from one (`identifiers`), never a path a spec or user wrote.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from firefeed.config import Settings
from firefeed.schema.identifiers import check_project_id, company_schema, staging_table

#: the key of a source's `staged_stats` holding its kept copy's identity
KEPT_COPY = "kept_copy"
#: the folder of the data folder holding the kept copies
FOLDER = "parsed"
_TMP = ".tmp-"


@dataclass(frozen=True)
class KeptCopy:
    """A kept copy's identity: its size, the sha256 its parse recorded, and its stat once renamed in place."""

    size: int
    sha256: str
    dev: int
    ino: int
    mtime_ns: int
    ctime_ns: int
    #: its records are known to be csv's records by their quotes (`record_diff.quotes_agree`): it was the
    #: new file of a diff that was not refused
    quotes_checked: bool = False

    def to_json(self) -> dict[str, int | str]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: object) -> KeptCopy | None:
        if not isinstance(doc, dict):
            return None
        try:
            return cls(
                size=int(doc["size"]),
                sha256=str(doc["sha256"]),
                dev=int(doc["dev"]),
                ino=int(doc["ino"]),
                mtime_ns=int(doc["mtime_ns"]),
                ctime_ns=int(doc["ctime_ns"]),
                quotes_checked=bool(doc.get("quotes_checked", False)),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def matches(self, path: Path) -> bool:
        """Whether the file at `path` is this copy, untouched since it was kept."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == (
            self.dev,
            self.ino,
            self.size,
            self.mtime_ns,
            self.ctime_ns,
        )


def project_folder(settings: Settings, company: str, project: str) -> Path:
    return settings.data_dir / FOLDER / company_schema(company) / check_project_id(project)


def path(settings: Settings, company: str, project: str, source: str) -> Path:
    """Where `source`'s kept copy lives (named as its staging table is: no user text in the path)."""
    return project_folder(settings, company, project) / staging_table(project, source)


def start(settings: Settings, company: str, project: str, source: str, feed: Path, run_id: str) -> Path:
    """A copy of `feed` under a temporary name beside the kept one (the run's own): what the parse reads.

    The source's other temporary copies are removed first: runs killed while copying or parsing left them
    (full-size files), and the run holds the project's lock, so none is being written now. OSError when the
    copy cannot be written (a full disk, an unwritable folder): the caller parses the file itself."""
    final = path(settings, company, project, source)
    final.parent.mkdir(parents=True, exist_ok=True)
    for left in final.parent.glob(f"{_TMP}{final.name}-*"):
        left.unlink(missing_ok=True)
    tmp = final.with_name(f"{_TMP}{final.name}-{run_id}")
    try:
        _copy(feed, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _copy(src: Path, dest: Path) -> None:
    """`src`'s bytes to `dest` in the kernel: `os.copy_file_range` (a reflink, free, where the file system
    shares extents: XFS, Btrfs; an in-kernel copy on ext4, 0.06-0.15 s for 139 MB here, as `shutil.copyfile`'s
    sendfile), else `shutil.copyfile`."""
    from firefeed.storage.copying import copy_in_kernel  # the storage package's exports import this module

    try:
        with src.open("rb") as fin, dest.open("wb") as fout:
            left = copy_in_kernel(fin.fileno(), fout.fileno())
        if left == 0:
            return
    except OSError:
        pass  # not on this kernel or between these file systems: copied below
    shutil.copyfile(src, dest)


def commit(
    settings: Settings, company: str, project: str, source: str, tmp: Path, sha256: str, *, quotes_checked: bool
) -> KeptCopy:
    """The copy `start` made, renamed in place of the kept one; its identity as the source's row records it."""
    from firefeed.storage import retire  # the storage package's exports import this module

    final = path(settings, company, project, source)
    # The last kept copy (as large as the feed) is freed on the deleter's thread, under a temporary name
    # `start` sweeps if a kill leaves it.
    retire.replace(tmp, final, final.with_name(f"{_TMP}{final.name}-retired-{secrets.token_hex(4)}"))
    st = os.stat(final)
    return KeptCopy(st.st_size, sha256, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, quotes_checked)


def discard(tmp: Path | None) -> None:
    """A copy `start` made that will not be kept (the parse failed or was refused)."""
    if tmp is not None:
        tmp.unlink(missing_ok=True)


def drop(settings: Settings, company: str, project: str, source: str) -> None:
    """Remove `source`'s kept copy (its staging table is no longer the copy's bytes, or the source is gone)."""
    path(settings, company, project, source).unlink(missing_ok=True)


def drop_unnamed(settings: Settings, company: str, project: str, sources: Iterable[str]) -> None:
    """Remove the kept copies of the project's sources other than `sources` (renamed or removed ones), and
    temporary copies runs left (a run of the project holds its lock: none is being written now)."""
    remove_others(project_folder(settings, company, project), {staging_table(project, s) for s in sources})


def remove_others(folder: Path, keep: set[str]) -> None:
    """Remove the files of `folder` not named in `keep` (a project's kept files of what its spec no longer
    names: source copies here, export line indexes in export/line_index.py); no folder, nothing to do."""
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name not in keep:
            entry.unlink(missing_ok=True)


def drop_project(settings: Settings, company: str, project: str) -> None:
    """Remove every kept copy of the project."""
    shutil.rmtree(project_folder(settings, company, project), ignore_errors=True)
