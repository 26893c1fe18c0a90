"""A big feed's frames made by a parser child process, while this process runs the COPYs.

Parsing a feed and encoding its rows as COPY text is the larger half of
STAGE's work and single-threaded Python (for the 1M-item CSV: csv.reader and
decoding ~4.5 s CPU, encoding ~1.7 s); the other half is the Postgres backend
ingesting the COPY (~4.5 s, on the other core). Done in the process that runs
the COPY, parsing also stops at every chunk's end while the COPY's end makes
its round trip (500 of them at 2000 rows a chunk: ~1.2 s). A child process
instead parses on into the pipe while a COPY ends, and this process only
escapes blocks (`escape_block`, ~0.5 s, moved here to unload the child, the
bottleneck) and forwards them.

The child is a fresh interpreter started with `subprocess`: it works where
multiprocessing cannot (a Celery prefork child is daemonic and may not have
children of its own), and it imports nothing but the readers. It receives the
pickled reader on stdin and writes frames to stdout, each a header (kind,
flags, rows, length) and a payload: COPY text for blocks, pickles for the
rest. The pipe holds about three blocks, so memory stays flat. The last frame
carries the reader's state (fields, stats, the encoding it settled on), which
the parent adopts, so the reader ends as if it had been read here; an
exception travels the same way (EncodingRestart included) and is raised here.
Leaving `copy_frames` kills the child, whether it finished or not; a child
whose parent died gets a broken pipe at its next write and exits.

Small feeds are not worth a process start (~70 ms; the break-even is ~20 MB),
and readers that are not plain file readers (a preview's sampling wrapper)
are read in process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import signal
import struct
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from firefeed.errors import FireFeedError
from firefeed.pipeline.parse._base import EncodingRestart, FeedReader
from firefeed.pipeline.parse._chunks import Block, End, Fields, Frame, escape_block, frames
from firefeed.pipeline.parse._encoding import FeedText
from firefeed.pipeline.parse.csv_reader import CsvReader
from firefeed.pipeline.parse.json_reader import JsonlReader, JsonReader
from firefeed.pipeline.parse.xml_reader import XmlReader

#: feeds smaller than this are parsed in process: a process start costs more than it saves
PROCESS_MIN_BYTES = 24 << 20
#: the pipe's capacity (Linux default 64 KiB): a few blocks, so the child can run ahead of a COPY's end
_PIPE_BYTES = 1 << 20

# glibc gives freed blocks (~0.3-1.5 MB each) back to the kernel and faults them in again for the
# next one: ~220,000 page faults for a 700 MB feed. Keeping them costs a few MB and ~0.8 s less CPU.
_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}

_HEAD = struct.Struct("<BBIQ")  # kind, flags, rows, payload length
_BLOCK, _FIELDS, _END, _ERROR = range(4)
_LAST, _JOINED = 1, 2  # block flags

#: the readers that pickle: before iterating, their state is a path and settings
_PORTABLE = (CsvReader, JsonReader, JsonlReader, XmlReader)

# The directory holding the `firefeed` package, so the child imports this very code.
_ROOT = str(Path(__file__).resolve().parents[3])


class ParserDied(RuntimeError):
    """The parser process stopped without saying why (killed, out of memory)."""


@contextlib.contextmanager
def copy_frames(reader: FeedReader, chunk_rows: int) -> Iterator[Iterator[Frame]]:
    """The frames of one pass over `reader` (see `_chunks.frames`), from a child process when that pays.

    Leaving the block stops the child (or closes the in-process generator),
    whether or not every frame was read.
    """
    proc = _spawn(reader, chunk_rows) if _worth_a_process(reader) else None
    if proc is None:
        local = frames(reader, chunk_rows)
        try:
            yield local
        finally:
            local.close()
        return
    try:
        assert proc.stdout is not None
        yield _receive(proc, proc.stdout, reader)
    finally:
        _stop(proc)


def _worth_a_process(reader: FeedReader) -> bool:
    if type(reader) not in _PORTABLE or not sys.executable:
        return False
    text: FeedText = reader._text  # type: ignore[attr-defined]  # every portable reader has one
    try:
        return text.path.stat().st_size >= PROCESS_MIN_BYTES
    except OSError:
        return False  # the in-process reader reports it as it always does


def _spawn(reader: FeedReader, chunk_rows: int) -> subprocess.Popen[bytes] | None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH", "")) if p)
    env.update(_MALLOC)
    command = [sys.executable, "-c", "from firefeed.pipeline.parse._child import main; main()"]
    try:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    except OSError:
        return None  # no interpreter to start: parse in process
    try:
        assert proc.stdin is not None and proc.stdout is not None
        setsize = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
        if setsize is not None:
            with contextlib.suppress(OSError):  # over the user's pipe quota: the default size works too
                fcntl.fcntl(proc.stdout.fileno(), setsize, _PIPE_BYTES)
        with proc.stdin:
            pickle.dump((reader, chunk_rows), proc.stdin)
    except BaseException:
        _stop(proc)
        raise
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child (done or not) and reap it; its pipes are closed."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def _receive(proc: subprocess.Popen[bytes], stream: IO[bytes], reader: FeedReader) -> Iterator[Frame]:
    """The child's frames; its final state goes into `reader`, its exception is raised here."""
    while True:
        head = stream.read(_HEAD.size)
        if len(head) < _HEAD.size:
            break
        kind, flags, rows, length = _HEAD.unpack(head)
        payload = stream.read(length)
        if len(payload) < length:
            break
        if kind == _BLOCK:
            # Escaping here takes that work off the child, which has more to do than this process.
            yield Block(rows, escape_block(payload) if flags & _JOINED else payload, bool(flags & _LAST))
        elif kind == _FIELDS:
            yield Fields(pickle.loads(payload))
        elif kind == _END:
            vars(reader).update(pickle.loads(payload))
            yield End()
            return
        else:
            state, exc = pickle.loads(payload)
            vars(reader).update(state)
            raise exc
    raise ParserDied(f"the parser process stopped unexpectedly (exit status {proc.wait()})")


# -- the child ---------------------------------------------------------------------------------


def main() -> None:
    """The child process: read the reader from stdin, write its frames to stdout."""
    # Ctrl-C reaches the whole process group: the parent decides, and kills this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    # Anything printed by accident goes to stderr, not into the frames.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    reader, chunk_rows = pickle.load(sys.stdin.buffer)
    try:
        try:
            for frame in frames(reader, chunk_rows, escape=False):
                if isinstance(frame, Block):
                    flags = (_LAST if frame.last else 0) | (_JOINED if frame.joined else 0)
                    out.write(_HEAD.pack(_BLOCK, flags, frame.rows, len(frame.data)))
                    out.write(frame.data)
                elif isinstance(frame, Fields):
                    _send(out, _FIELDS, frame.names)
            _send(out, _END, vars(reader))
        except BrokenPipeError:
            raise
        except BaseException as exc:
            _send(out, _ERROR, (vars(reader), _portable(exc)))
        out.close()
    except BrokenPipeError:
        os._exit(1)  # the parent is gone or gave up: nobody to tell


def _send(out: IO[bytes], kind: int, value: Any) -> None:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEAD.pack(kind, 0, 0, len(payload)))
    out.write(payload)
    out.flush()


def _portable(exc: BaseException) -> object:
    """`exc` in a form that pickles and unpickles as `exc`; what cannot becomes a RuntimeError."""
    if isinstance(exc, FireFeedError | EncodingRestart):
        portable: object = _Rebuilt(exc)
    else:
        # An unexpected failure: keep the child's traceback, which the parent's cannot show.
        exc.add_note("".join(traceback.format_exception(exc)).rstrip())
        portable = exc
    try:
        pickle.loads(pickle.dumps(portable))
    except Exception:
        portable = RuntimeError("the parser process failed: " + "".join(traceback.format_exception(exc)).rstrip())
    return portable


class _Rebuilt:
    """Pickles as the exception it holds, rebuilt from class, args and attributes without calling __init__.

    FireFeed's errors take other arguments than they keep, so the usual
    pickling of exceptions cannot recreate them.
    """

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self.exc), self.exc.args, dict(vars(self.exc))))


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    exc = cls.__new__(cls)
    exc.args = args
    vars(exc).update(state)
    return exc
