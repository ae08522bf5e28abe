"""Reading what an agent program produced, without trusting the files it could touch.

The program's standard output and error go to files the worker opened itself, outside the
session directory (``<work_dir>/.outputs/<attempt>/``, hidden in the sandbox), and are read back
through the worker's own descriptors: whatever the program does to paths cannot change what is
read. A report file the program writes itself (Codex's ``--output-last-message``) is opened
relative to the session directory without following a link and without blocking, and must be a
regular file of at most :data:`MAX_REPORT_FILE` bytes; anything else (a FIFO, a symlink to
another file, a giant or sparse file) ends the session with :class:`AgentOutputRefused`.

Every read is bounded: the last :data:`MAX_OUTPUT` bytes are the REPORT (or the error's tail),
and once the session ends that is all that is kept of each output (:func:`keep_tail`); while it
runs, they count in its disk quota (:mod:`surehand.agents.quotas`).
Decoded as UTF-8 with bad bytes and NUL characters replaced, so any output is valid REPORT text.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from surehand.errors import AgentOutputRefused

MAX_OUTPUT = 512 * 1024  # the REPORT is at most the last 512 KiB of what the program wrote
MAX_REPORT_FILE = 16 * 1024 * 1024
TAIL = 4096  # bytes of each output kept with the attempt (the console, show, the API)
OUTPUTS_DIR = ".outputs"
_OPEN_NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def open_private(directory: Path, name: str) -> IO[bytes]:
    """A new file ``name`` in ``directory`` that only this user can read, for the program's
    output (read back with :func:`tail_of` through the returned file's own descriptor)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(directory / name, _OPEN_NEW, 0o600)
    return os.fdopen(fd, "w+b")


def tail_of(file: IO[bytes], limit: int = MAX_OUTPUT) -> str:
    """The last ``limit`` bytes of an open file, as text (bounded, whatever its size)."""
    return _text(_read_tail(file.fileno(), limit))


@contextlib.contextmanager
def captured(directory: Path) -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """New private files for a program's standard output and error in ``directory``, cut to
    their tails (:func:`keep_tail`) when the block ends: what is kept is what is read."""
    with (
        open_private(directory, "stdout.txt") as stdout,
        open_private(directory, "stderr.txt") as err,
    ):
        try:
            yield stdout, err
        finally:
            keep_tail(stdout)
            keep_tail(err)


def output_tails(stdout: IO[bytes], stderr: IO[bytes], limit: int = TAIL) -> dict[str, str]:
    """The ends of a program's standard output and error, kept with its attempt (bounded:
    ``limit`` bytes each) so that a person sees why it failed."""
    return {"stdout": tail_of(stdout, limit), "stderr": tail_of(stderr, limit)}


def keep_tail(file: IO[bytes], limit: int = MAX_OUTPUT) -> None:
    """Cut an output file the program no longer writes to its last ``limit`` bytes (what
    :func:`tail_of` reads): a finished session keeps at most that of each on disk."""
    fd = file.fileno()
    if os.fstat(fd).st_size <= limit:
        return
    tail = _read_tail(fd, limit)
    os.ftruncate(fd, 0)
    os.pwrite(fd, tail, 0)


def read_report_file(session_dir: Path, name: str, limit: int = MAX_OUTPUT) -> str:
    """The text of the report file ``name`` the program wrote in ``session_dir`` ("" if it
    wrote none); :class:`AgentOutputRefused` unless it is a regular file of a sane size."""
    directory = os.open(session_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory
        )
    except FileNotFoundError:
        return ""
    except OSError as error:  # ELOOP: a symlink
        raise _refused(name, f"cannot be opened safely ({error.strerror})") from None
    finally:
        os.close(directory)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(name, "is not a regular file (a FIFO, a device or a directory)")
        if info.st_size > MAX_REPORT_FILE:
            raise _refused(name, f"is {info.st_size} bytes, over {MAX_REPORT_FILE}")
        return _text(_read_tail(fd, limit))
    finally:
        os.close(fd)


def _refused(name: str, why: str) -> AgentOutputRefused:
    return AgentOutputRefused(
        f"the agent's report file {name} {why}; nothing of it was read", file=name
    )


def _read_tail(fd: int, limit: int) -> bytes:
    size = os.fstat(fd).st_size
    start = max(0, size - limit)
    chunks, read = [], 0
    while read < size - start:
        chunk = os.pread(fd, min(1 << 20, size - start - read), start + read)
        if not chunk:
            break
        chunks.append(chunk)
        read += len(chunk)
    return b"".join(chunks)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").replace("\x00", "\ufffd").strip()
