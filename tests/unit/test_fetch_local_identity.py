"""A local file's stat identity stands for its digest (#52): an unchanged file is not read again, and
every way a file can change under the same name (an edit in the same stamp, an edit that puts the
mtime back, a file replaced) is read and seen."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from firefeed.config import Settings
from firefeed.dataplane import file_identity
from firefeed.dataplane.file_identity import RACY_MARGIN_NS, FileIdentity
from firefeed.errors import FireFeedError
from firefeed.pipeline import fetch as fetch_module
from firefeed.pipeline.fetch import FetchResult, Validators, fetch_source

OLD = b"id,stock\n1,5\n2,7\n"
NEW = b"id,stock\n1,0\n2,7\n"  # the same size


def fetch(tmp_path: Path, name: str, previous: Validators | None) -> FetchResult:
    settings = Settings(_env_file=None, fetch_max_bytes=1 << 20, local_sources_root=None)  # type: ignore[call-arg]
    return fetch_source(
        source="stock",
        url=name,
        dest_dir=tmp_path / "dl",
        base_dir=tmp_path,
        headers=None,
        previous=previous,
        settings=settings,
    )


def settled(identity: FileIdentity | None) -> FileIdentity:
    """The identity as a digest taken RACY_MARGIN_NS after the file's last stamp would have kept it (the
    rule under test without sleeping out the margin in every test)."""
    assert identity is not None
    return dataclasses.replace(identity, taken_ns=max(identity.mtime_ns, identity.ctime_ns) + RACY_MARGIN_NS + 1)


def kept(tmp_path: Path, name: str = "stock.csv") -> Validators:
    """The validators a run keeps after hashing the file: its digest and its (settled) stat identity."""
    first = fetch(tmp_path, name, Validators(sha256="0" * 64))
    assert not first.not_modified and first.validators.sha256 is not None
    return Validators(sha256=first.validators.sha256, identity=settled(first.validators.identity))


@pytest.fixture()
def unread(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files FETCH hashed while the test ran."""
    read: list[Path] = []
    digest = fetch_module._local_digest

    def counted(path: Path, **kwargs: Any) -> Any:
        read.append(path)
        return digest(path, **kwargs)

    monkeypatch.setattr(fetch_module, "_local_digest", counted)
    return read


def test_an_unchanged_file_whose_stat_is_the_kept_identity_is_not_read(tmp_path: Path, unread: list[Path]) -> None:
    (tmp_path / "stock.csv").write_bytes(OLD)
    previous = kept(tmp_path)
    unread.clear()
    again = fetch(tmp_path, "stock.csv", previous)
    assert again.not_modified and again.path is None and again.bytes == len(OLD)
    assert unread == []  # the digest was not taken: the identity vouched for it
    assert again.validators == previous  # exactly the validators the last run recorded


def test_an_unchanged_file_fetched_for_real_after_the_margin_is_not_read_again(
    tmp_path: Path, unread: list[Path]
) -> None:
    """The margin itself: an identity taken more than RACY_MARGIN_NS after the file's stamps is trusted."""
    (tmp_path / "stock.csv").write_bytes(OLD)
    time.sleep(RACY_MARGIN_NS / 1e9 + 0.2)
    first = fetch(tmp_path, "stock.csv", Validators(sha256="0" * 64))
    previous = Validators(sha256=first.validators.sha256, identity=first.validators.identity)
    unread.clear()
    assert fetch(tmp_path, "stock.csv", previous).not_modified
    assert unread == []


def test_an_identity_taken_within_the_margin_is_not_trusted_and_an_edit_in_the_same_stamp_is_seen(
    tmp_path: Path, unread: list[Path]
) -> None:
    """The racy case: a same-size edit whose stamps the coarse clock left as they were. The stat is the
    one kept, but the digest was taken within the margin of those stamps: the file is read again."""
    path = tmp_path / "stock.csv"
    path.write_bytes(OLD)
    old_sha = hashlib.sha256(OLD).hexdigest()
    path.write_bytes(NEW)
    # The identity the read of OLD would have kept had the edit to NEW left the stat as it was.
    racy = FileIdentity.of(os.stat(path), old_sha, time.time_ns())
    assert not racy.vouches_for(os.stat(path), old_sha)
    unread.clear()
    result = fetch(tmp_path, "stock.csv", Validators(sha256=old_sha, identity=racy))
    assert not result.not_modified and unread == [path]
    assert result.validators.sha256 == hashlib.sha256(NEW).hexdigest()
    # recorded anew, bound to the new digest
    assert result.validators.identity is not None and result.validators.identity.sha256 == result.validators.sha256


def test_a_racy_identity_of_an_unchanged_file_reads_it_and_records_the_identity_anew(
    tmp_path: Path, unread: list[Path]
) -> None:
    path = tmp_path / "stock.csv"
    path.write_bytes(OLD)
    sha = hashlib.sha256(OLD).hexdigest()
    racy = FileIdentity.of(os.stat(path), sha, time.time_ns())
    unread.clear()
    result = fetch(tmp_path, "stock.csv", Validators(sha256=sha, identity=racy))
    assert result.not_modified and unread == [path]
    assert result.validators.sha256 == sha and result.validators.identity is not None
    assert result.validators.identity.taken_ns >= racy.taken_ns


def test_an_edit_that_puts_the_mtime_back_is_seen_by_its_ctime(tmp_path: Path, unread: list[Path]) -> None:
    path = tmp_path / "stock.csv"
    path.write_bytes(OLD)
    previous = kept(tmp_path)
    before = os.stat(path)
    assert previous.identity is not None and previous.identity.vouches_for(before, previous.sha256)
    time.sleep(0.05)  # past the coarse clock's tick: the edit's ctime is another stamp
    path.write_bytes(NEW)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    unread.clear()
    result = fetch(tmp_path, "stock.csv", previous)
    assert not result.not_modified and unread == [path]
    assert result.validators.sha256 == hashlib.sha256(NEW).hexdigest()


def test_a_file_replaced_by_another_of_the_same_size_and_mtime_is_seen_by_its_inode(
    tmp_path: Path, unread: list[Path]
) -> None:
    path = tmp_path / "stock.csv"
    path.write_bytes(OLD)
    previous = kept(tmp_path)
    before = os.stat(path)
    other = tmp_path / "stock.next"
    other.write_bytes(NEW)
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(other, path)
    assert os.stat(path).st_ino != before.st_ino
    unread.clear()
    result = fetch(tmp_path, "stock.csv", previous)
    assert not result.not_modified and unread == [path]


def test_an_identity_bound_to_another_digest_does_not_vouch(tmp_path: Path, unread: list[Path]) -> None:
    """The identity is kept beside the digest it was taken with: the row's digest moved on, the identity
    did not (a parse staged other bytes), so it says nothing."""
    (tmp_path / "stock.csv").write_bytes(OLD)
    previous = kept(tmp_path)
    unread.clear()
    result = fetch(tmp_path, "stock.csv", dataclasses.replace(previous, sha256="1" * 64))
    assert not result.not_modified and len(unread) == 1


def test_a_compressed_local_file_follows_the_same_rule(tmp_path: Path, unread: list[Path]) -> None:
    """Its digest is of the compressed bytes; an unchanged one is neither read nor decompressed."""
    path = tmp_path / "stock.csv.gz"
    path.write_bytes(gzip.compress(OLD, mtime=0))
    previous = kept(tmp_path, "stock.csv.gz")
    assert previous.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    shutil.rmtree(tmp_path / "dl")  # the first fetch's decompressed copy
    unread.clear()
    again = fetch(tmp_path, "stock.csv.gz", previous)
    assert again.not_modified and again.path is None and unread == []
    assert not (tmp_path / "dl").exists()  # not decompressed either
    time.sleep(0.05)
    path.write_bytes(gzip.compress(NEW, mtime=0))
    changed = fetch(tmp_path, "stock.csv.gz", previous)
    assert not changed.not_modified and changed.path is not None and changed.path.read_bytes() == NEW


def test_an_identity_reads_back_from_what_a_run_keeps(tmp_path: Path) -> None:
    (tmp_path / "stock.csv").write_bytes(OLD)
    identity = kept(tmp_path).identity
    assert identity is not None and FileIdentity.from_json(identity.to_json()) == identity
    assert FileIdentity.from_json(None) is None
    assert FileIdentity.from_json({"sha256": "x"}) is None
    assert FileIdentity.from_json({**identity.to_json(), "ino": "12"}) is None


# A kept identity is never a way around what a read checks: the path is refused out of the allowed folders
# before any identity is looked at, a lowered size cap still refuses the file, and a symlink's identity is
# its target's (the path is resolved first).
def fetch_in(root: Path, name: str, previous: Validators | None, *, max_bytes: int = 1 << 20) -> FetchResult:
    settings = Settings(_env_file=None, fetch_max_bytes=max_bytes, local_sources_root=None)  # type: ignore[call-arg]
    return fetch_source(
        source="stock",
        url=name,
        dest_dir=root / "dl",
        base_dir=root,
        headers=None,
        previous=previous,
        settings=settings,
    )


def test_a_link_out_of_the_allowed_folder_is_refused_though_its_target_has_the_kept_identity(
    tmp_path: Path, unread: list[Path]
) -> None:
    """The file was in the folder when its identity was kept; it moved out and a link took its place."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "stock.csv").write_bytes(OLD)
    previous = kept(root)
    os.replace(root / "stock.csv", outside / "stock.csv")
    (root / "stock.csv").symlink_to(outside / "stock.csv")
    # The rename moved ctime on most file systems; the identity as the target's stat is now.
    st = os.stat(outside / "stock.csv")
    assert previous.identity is not None
    identity = dataclasses.replace(
        previous.identity,
        ctime_ns=st.st_ctime_ns,
        mtime_ns=st.st_mtime_ns,
        taken_ns=max(st.st_ctime_ns, st.st_mtime_ns) + RACY_MARGIN_NS + 1,
    )
    assert identity.vouches_for(st, previous.sha256)  # were the path not checked first, it would stand
    with pytest.raises(FireFeedError, match="outside the allowed folders"):
        fetch_in(root, "stock.csv", dataclasses.replace(previous, identity=identity))


def test_a_lowered_size_cap_refuses_a_file_its_kept_identity_vouches_for(tmp_path: Path, unread: list[Path]) -> None:
    (tmp_path / "stock.csv").write_bytes(OLD)
    previous = kept(tmp_path)
    unread.clear()
    with pytest.raises(FireFeedError, match=r"(?i)large|limit|bytes"):
        fetch_in(tmp_path, "stock.csv", previous, max_bytes=len(OLD) - 1)
    assert unread == []


def test_a_link_moved_to_a_copy_with_the_same_size_and_times_is_read(tmp_path: Path, unread: list[Path]) -> None:
    """The identity is the target's (the path is resolved first): another target is another inode."""
    (tmp_path / "a.csv").write_bytes(OLD)
    (tmp_path / "stock.csv").symlink_to(tmp_path / "a.csv")
    previous = kept(tmp_path)
    st = os.stat(tmp_path / "a.csv")
    (tmp_path / "b.csv").write_bytes(NEW)
    os.utime(tmp_path / "b.csv", ns=(st.st_atime_ns, st.st_mtime_ns))
    (tmp_path / "stock.csv").unlink()
    (tmp_path / "stock.csv").symlink_to(tmp_path / "b.csv")
    unread.clear()
    result = fetch_in(tmp_path, "stock.csv", previous)
    assert not result.not_modified and unread == [tmp_path / "b.csv"]


def test_an_edit_through_a_hard_link_that_puts_the_mtime_back_is_seen(tmp_path: Path, unread: list[Path]) -> None:
    path = tmp_path / "stock.csv"
    path.write_bytes(OLD)
    os.link(path, tmp_path / "other.csv")
    previous = kept(tmp_path)
    st = os.stat(path)
    (tmp_path / "other.csv").write_bytes(NEW)  # in place: the same inode
    os.utime(tmp_path / "other.csv", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_ino == st.st_ino and os.stat(path).st_size == st.st_size
    unread.clear()
    result = fetch_in(tmp_path, "stock.csv", previous)
    assert not result.not_modified and unread == [path]


def test_whole_second_stamps_never_vouch() -> None:
    """1 s stamps (a network file system, stamped by its server's clock): a same-size edit within the stamp's
    second would keep the stat, and the server's clock may lag the margin: such an identity is not trusted."""
    from types import SimpleNamespace

    second = 1_700_000_000 * 1_000_000_000
    stamps = {"st_dev": 1, "st_ino": 2, "st_size": 3}
    coarse = FileIdentity(1, 2, 3, second, second, "a" * 64, taken_ns=second + 10 * RACY_MARGIN_NS)
    fine = dataclasses.replace(coarse, ctime_ns=second + 123)
    coarse_stat = SimpleNamespace(**stamps, st_mtime_ns=second, st_ctime_ns=second)
    fine_stat = SimpleNamespace(**stamps, st_mtime_ns=second, st_ctime_ns=second + 123)
    assert not coarse.vouches_for(coarse_stat, "a" * 64)  # type: ignore[arg-type]
    assert fine.vouches_for(fine_stat, "a" * 64)  # type: ignore[arg-type]


# -- the digest taken beside a parse (`file_digest`) ---------------------------------------------------


def test_a_digest_beside_a_long_parse_waits_out_the_margin_and_its_identity_vouches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_identity, "RACY_MARGIN_NS", 300_000_000)
    path = tmp_path / "feed.csv"
    path.write_bytes(OLD)  # written just now: within the margin
    with fetch_module.file_digest(path) as digest:
        time.sleep(0.5)  # the parse takes longer than the margin
        got = digest()
    assert got.sha256 == hashlib.sha256(OLD).hexdigest()
    assert got.identity is not None and got.identity.vouches_for(path.stat(), got.sha256)


def test_a_digest_asked_for_at_once_does_not_wait_and_its_identity_does_not_vouch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_identity, "RACY_MARGIN_NS", 5_000_000_000)
    path = tmp_path / "feed.csv"
    path.write_bytes(OLD)
    t = time.monotonic()
    with fetch_module.file_digest(path) as digest:
        got = digest()
    assert time.monotonic() - t < 2  # a short parse is not held up by the margin
    assert got.sha256 == hashlib.sha256(OLD).hexdigest()
    assert got.identity is None or not got.identity.vouches_for(path.stat(), got.sha256)


def test_a_file_edited_while_the_digest_waits_gets_no_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_identity, "RACY_MARGIN_NS", 400_000_000)
    path = tmp_path / "feed.csv"
    path.write_bytes(OLD)
    with fetch_module.file_digest(path) as digest:
        time.sleep(0.1)
        with path.open("r+b") as f:  # the same inode, other bytes of the same size
            f.write(NEW)
        time.sleep(0.5)
        got = digest()
    assert got.sha256 == hashlib.sha256(NEW).hexdigest()
    assert got.identity is None


def test_a_file_of_another_size_than_its_kept_identity_is_changed_without_being_read(
    tmp_path: Path, unread: list[Path]
) -> None:
    """Its digest is left to PARSE (taken beside the parse, as a first read's): FETCH does not read it."""
    (tmp_path / "stock.csv").write_bytes(OLD)
    previous = kept(tmp_path)
    unread.clear()
    (tmp_path / "stock.csv").write_bytes(OLD + b"3,1\n")
    again = fetch(tmp_path, "stock.csv", previous)
    assert not again.not_modified and again.path == tmp_path / "stock.csv"
    assert again.validators.sha256 is None and again.bytes == len(OLD) + 4
    assert unread == []


def test_a_touched_file_of_the_same_size_is_read_and_not_modified(tmp_path: Path, unread: list[Path]) -> None:
    (tmp_path / "stock.csv").write_bytes(OLD)
    previous = kept(tmp_path)
    unread.clear()
    (tmp_path / "stock.csv").write_bytes(OLD)  # rewritten, the same bytes: a new stamp
    again = fetch(tmp_path, "stock.csv", previous)
    assert again.not_modified and unread == [tmp_path / "stock.csv"]


def test_a_size_is_compared_only_with_the_identity_of_the_kept_digest(tmp_path: Path, unread: list[Path]) -> None:
    """An identity kept with another digest than the recorded one says nothing of the file's size."""
    (tmp_path / "stock.csv").write_bytes(OLD)
    previous = kept(tmp_path)
    assert previous.identity is not None
    other = Validators(sha256=previous.sha256, identity=dataclasses.replace(previous.identity, sha256="1" * 64))
    (tmp_path / "stock.csv").write_bytes(OLD + b"3,1\n")
    unread.clear()
    again = fetch(tmp_path, "stock.csv", other)
    assert not again.not_modified and again.validators.sha256 is not None
    assert unread == [tmp_path / "stock.csv"]
