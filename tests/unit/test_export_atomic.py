"""AtomicOutput.append_from: bytes of another file appended as write() would, by the kernel or by hand."""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from pathlib import Path

import pytest

from firefeed.export import _atomic
from firefeed.export._atomic import atomic_output


def _spool(data: bytes) -> tempfile._TemporaryFileWrapper[bytes]:
    spool = tempfile.NamedTemporaryFile()  # noqa: SIM115 - closed by the test
    spool.write(data)
    spool.flush()
    return spool


@pytest.mark.parametrize("how", ["kernel", "by hand", "gzip", "kernel refuses"])
def test_appended_bytes_land_after_the_written_ones_and_in_the_hash(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    head, tail = b"<head>\n", b"</tail>\n"
    body = os.urandom(3 * (1 << 20) + 12345)  # several batches and a partial one
    if how == "kernel refuses":

        def refuse(*args: object) -> int:
            raise OSError(18, "Invalid cross-device link")

        monkeypatch.setattr(_atomic.os, "copy_file_range", refuse)
    dest = tmp_path / "out.bin"
    with _spool(b"skip" + body + b"after") as spool, atomic_output(dest, compress=how == "gzip") as out:
        if how == "by hand":
            out._copy_in_kernel = False
        out.write(head)
        out.append_from(spool.fileno(), 4, len(body))
        out.write(tail)
    written = dest.read_bytes()
    assert out.sha256 == hashlib.sha256(written).hexdigest() and out.bytes == len(written)
    assert (gzip.decompress(written) if how == "gzip" else written) == head + body + tail
