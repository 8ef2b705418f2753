"""Every file kernloom writes or reads, written atomically and read within bounds.

Writing: the bytes go to a temporary file in the target's own directory, are flushed and
fsynced, and only then ``os.replace`` puts them in place. A full disk, a failing write or
a kill half-way therefore leaves the old file exactly as it was (and, except after a
kill, no temporary file). Truncating the target first, as ``open(path, "w")`` does, is
what lost a good model to a full disk.

Reading: a file we load (a graph, a feed) must be a regular file no larger than a
limit, so that ``/dev/zero``, a FIFO with no writer or a 100 GB file is a clear error
instead of a hang or an exhausted memory. The limit is ``DEFAULT_MAX_READ_BYTES``
unless the caller passes another (the command line's ``--max-input-size``).

Failures are ``FileError``: an ``OSError`` (so ``except OSError`` catches it, with
``errno`` and ``filename`` set) and a ``KernloomError`` whose message is
``"<path>: <what went wrong>"``, e.g. ``model.json: no space left on device``.
"""

from __future__ import annotations

import errno as errno_codes
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Final

from kernloom.errors import InvalidArgumentError, KernloomError

__all__ = [
    "DEFAULT_MAX_READ_BYTES",
    "FileError",
    "FileReadError",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "describe_os_error",
    "open_regular_file",
    "parent_problem",
    "read_text_bounded",
]

DEFAULT_MAX_READ_BYTES: Final = 2 * 2**30
"""Files larger than this (2 GiB) are refused when read, unless the caller allows more."""

_PathLike = str | os.PathLike[str]


class FileError(KernloomError, OSError):
    """A file could not be written or read; ``str()`` is ``"<path>: <what went wrong>"``."""

    def __init__(self, path: _PathLike, problem: str, code: int | None = None) -> None:
        OSError.__init__(self, code, problem, os.fspath(path))
        self.hint = None
        self.path = os.fspath(path)
        self.problem = problem

    @property
    def message(self) -> str:
        return f"{self.path}: {self.problem}"

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.problem, self.errno))


class FileReadError(FileError, InvalidArgumentError):
    """A file to load is missing, unreadable, not a regular file or over the size limit.

    Also an ``InvalidArgumentError``, the error every loader raises for a bad file."""


def describe_os_error(exc: OSError) -> str:
    """``no space left on device``: the OS's reason, lower-cased to continue a sentence."""
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    return reason[:1].lower() + reason[1:]


def _write_error(path: _PathLike, exc: OSError) -> FileError:
    return FileError(path, describe_os_error(exc), exc.errno)


def _target(path: _PathLike) -> Path:
    """The file to replace: a symlink's target, so that saving through a link updates the
    file it points at rather than replacing the link."""
    target = Path(os.path.realpath(path))
    try:
        is_dir = target.is_dir()
    except OSError as exc:  # ENAMETOOLONG, a symlink loop...: the name itself cannot be used
        raise FileError(path, os.strerror(exc.errno or 0).lower(), exc.errno) from None
    if is_dir:
        raise FileError(path, "is a directory; give a file name", errno_codes.EISDIR)
    problem = parent_problem(target)
    if problem is not None:
        raise FileError(path, problem, errno_codes.ENOENT)
    return target


def parent_problem(path: Path) -> str | None:
    """Why a file cannot be created at ``path`` because of its folder (it is missing, or a
    file stands where a folder should be), or None: every writer and every CLI flag that
    names an output checks this before it runs anything."""
    parent = path.parent
    if parent.is_dir():
        return None
    for folder in [parent, *parent.parents]:
        if folder.exists():
            if folder.is_dir():
                break
            return f"{folder} is a file, not a directory"
    return f"directory {parent} does not exist"


_NAME_MAX: Final = 255
"""The longest file name (in characters; bytes on POSIX) common file systems take."""


def _create_temporary(target: Path) -> tuple[int, Path]:
    """An exclusive new file beside ``target``; mode 0o666 less the umask, as ``open``."""
    # ".<name>.<8 hex>.tmp" adds 14 characters: a legal name near the limit (255 bytes on
    # most file systems) keeps only the room that leaves.
    stem = target.name[: max(1, _NAME_MAX - 14)]
    for _ in range(100):
        temporary = target.with_name(f".{stem}.{secrets.token_hex(4)}.tmp")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(temporary, flags, 0o666), temporary
        except FileExistsError:
            continue
    raise FileError(target, "cannot create a temporary file beside it", errno_codes.EEXIST)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable; not every platform can open a directory."""
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def atomic_write(path: _PathLike) -> Iterator[IO[bytes]]:
    """``with atomic_write(path) as f: f.write(...)``: ``path`` gets all of it or nothing.

    The old file (if any) stays until the new one is complete on disk; its permissions
    carry over. An exception inside the block, or any failure writing, removes the
    temporary file and leaves ``path`` untouched; an ``OSError`` becomes ``FileError``.
    """
    target = _target(path)
    try:
        fd, temporary = _create_temporary(target)
    except OSError as exc:
        raise _write_error(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        with suppress(FileNotFoundError):
            os.chmod(temporary, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(temporary, target)
    except BaseException as exc:
        with suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError) and not isinstance(exc, FileError):
            raise _write_error(path, exc) from exc
        raise
    _fsync_directory(target.parent)


def atomic_write_bytes(path: _PathLike, data: bytes) -> None:
    with atomic_write(path) as stream:
        stream.write(data)


def atomic_write_text(path: _PathLike, text: str) -> None:
    """Write ``text`` as UTF-8, atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: _PathLike, write: Callable[[IO[bytes]], object]) -> None:
    """``write(stream)`` into ``path``, atomically (for writers such as ``numpy.save``)."""
    with atomic_write(path) as stream:
        write(stream)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _size(n: int) -> str:
    if n < 2**20:
        return f"{n} B"
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


@contextmanager
def open_regular_file(
    path: _PathLike, *, max_bytes: int = DEFAULT_MAX_READ_BYTES, limit_hint: str = ""
) -> Iterator[IO[bytes]]:
    """Open ``path`` for reading if it is a regular file of at most ``max_bytes``.

    Opened without blocking before anything else is asked, so a FIFO with no writer is
    refused rather than waited on. ``limit_hint`` tells how to raise the limit
    (``"pass --max-input-size"``) in the error for a file that is too large.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileReadError(path, describe_os_error(exc), exc.errno) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileReadError(
                path, f"{_kind(info.st_mode)}, not a regular file", errno_codes.EINVAL
            )
        if info.st_size > max_bytes:
            raise FileReadError(
                path,
                f"{_size(info.st_size)}, more than the limit of {_size(max_bytes)}"
                + (f"; {limit_hint}" if limit_hint else ""),
                errno_codes.EFBIG,
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        stream = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with stream:
        yield stream


def read_text_bounded(
    path: _PathLike, *, max_bytes: int = DEFAULT_MAX_READ_BYTES, limit_hint: str = ""
) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``; ``FileReadError`` else."""
    with open_regular_file(path, max_bytes=max_bytes, limit_hint=limit_hint) as stream:
        try:
            data = stream.read(max_bytes + 1)
        except OSError as exc:
            raise FileReadError(path, describe_os_error(exc), exc.errno) from None
    if len(data) > max_bytes:  # it grew while we read it
        raise FileReadError(path, f"more than the limit of {_size(max_bytes)}", errno_codes.EFBIG)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileReadError(
            path, f"not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x})", None
        ) from None
