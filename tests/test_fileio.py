"""Atomic writes and bounded reads (``kernloom.fileio``), and that every writer uses them."""

from __future__ import annotations

import errno
import os
import pickle
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import IO

import numpy as np
import pytest

import kernloom as kl
from kernloom import fileio
from kernloom.errors import InvalidArgumentError, KernloomError
from kernloom.fileio import FileError, FileReadError

REPO = Path(__file__).resolve().parents[1]


def _no_temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_replaces_the_file_and_keeps_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "model.json"
    target.write_text("old")
    target.chmod(0o640)
    fileio.atomic_write_text(target, "new ✓")
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _no_temporaries(tmp_path) == []


def test_a_new_file_gets_the_umask_permissions_as_open_would(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        fileio.atomic_write_bytes(tmp_path / "a.bin", b"x")
        (tmp_path / "b.bin").write_bytes(b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.bin").stat().st_mode) == stat.S_IMODE(
        (tmp_path / "b.bin").stat().st_mode
    )


def test_saving_through_a_symlink_updates_the_file_it_points_at(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    fileio.atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def _enospc(*args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_at_fsync_keeps_the_old_file_and_names_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "model.json"
    target.write_text("the good model")
    monkeypatch.setattr(fileio.os, "fsync", _enospc)
    with pytest.raises(FileError) as info:
        fileio.atomic_write_text(target, "x" * 10_000)
    assert str(info.value) == f"{target}: no space left on device"
    assert isinstance(info.value, OSError) and isinstance(info.value, KernloomError)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert target.read_text() == "the good model"
    assert _no_temporaries(tmp_path) == []


def test_a_full_disk_half_way_through_writing_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "weights.npy"
    np.save(target, np.arange(3))

    def half_then_full(stream: IO[bytes]) -> None:
        stream.write(b"\x93NUMPY partial")
        stream.flush()
        _enospc()

    with pytest.raises(FileError, match="no space left on device"):
        fileio.atomic_write_with(target, half_then_full)
    np.testing.assert_array_equal(np.load(target), np.arange(3))
    assert _no_temporaries(tmp_path) == []


def test_an_exception_inside_the_block_leaves_no_trace(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"

    def fail_half_way(stream: IO[bytes]) -> None:
        stream.write(b"half")
        raise KeyError("the caller failed")

    with pytest.raises(KeyError):
        fileio.atomic_write_with(target, fail_half_way)
    assert not target.exists() and _no_temporaries(tmp_path) == []


def test_graph_save_on_a_full_disk_keeps_the_saved_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "g.json"
    g = kl.Graph()
    with g.as_default():
        kl.constant(np.ones(3, np.float32), name="c")
    g.save(path)
    before = path.read_bytes()
    with g.as_default():
        kl.constant(np.zeros(100_000, np.float32), name="big")
    monkeypatch.setattr(fileio.os, "fsync", _enospc)
    with pytest.raises(OSError, match=re.escape(f"{path}: no space left on device")):
        g.save(path)
    assert path.read_bytes() == before
    assert [n.name for n in kl.Graph.load(path).nodes] == ["c"]


def test_a_kill_in_the_middle_of_a_save_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "model.json"
    target.write_text('{"the": "good model"}')
    child = textwrap.dedent(
        f"""
        import sys, time
        from kernloom import fileio
        with fileio.atomic_write({str(target)!r}) as stream:
            stream.write(b"{{" + b" " * 1_000_000)
            stream.flush()
            print("half written", flush=True)
            time.sleep(60)
        """
    )
    with subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "half written"
        finally:
            proc.kill()
    assert proc.returncode == -9
    assert target.read_text() == '{"the": "good model"}'


def test_writing_to_a_directory_or_a_missing_directory_is_a_file_error(tmp_path: Path) -> None:
    with pytest.raises(FileError, match="is a directory"):
        fileio.atomic_write_text(tmp_path, "x")
    with pytest.raises(FileError, match=r"directory .*nowhere does not exist"):
        fileio.atomic_write_text(tmp_path / "nowhere" / "x.json", "x")
    (tmp_path / "plain").write_text("a file")
    with pytest.raises(FileError, match=r"plain is a file, not a directory"):
        fileio.atomic_write_text(tmp_path / "plain" / "deeper" / "x.json", "x")


def test_file_errors_survive_pickling(tmp_path: Path) -> None:
    error = FileReadError(tmp_path / "x", "a FIFO (named pipe), not a regular file", errno.EINVAL)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is FileReadError and str(copy) == str(error) and copy.errno == errno.EINVAL


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d, "a directory, not a regular file"),
        (lambda d: Path("/dev/zero"), "a character device, not a regular file"),
        (lambda d: d / "missing.json", "no such file or directory"),
    ],
)
def test_reads_refuse_what_is_not_a_regular_file(
    tmp_path: Path, make: object, message: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(FileReadError) as info:
        fileio.read_text_bounded(path)
    assert str(info.value) == f"{path}: {message}"
    assert isinstance(info.value, InvalidArgumentError) and isinstance(info.value, OSError)


def test_a_fifo_without_a_writer_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(FileReadError, match="a FIFO"):
        fileio.read_text_bounded(fifo)


def test_reads_refuse_files_over_the_limit_and_say_how_to_raise_it(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 4096)
    with pytest.raises(FileReadError, match=r"4096 B, more than the limit of 1024 B; pass -x"):
        fileio.read_text_bounded(big, max_bytes=1024, limit_hint="pass -x")
    assert fileio.read_text_bounded(big, max_bytes=4096) == " " * 4096


def test_reads_name_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(FileReadError, match=r"latin1.json: not UTF-8 text \(byte 7 is 0xe9\)"):
        fileio.read_text_bounded(bad)


_WRITERS = re.compile(
    r"\.write_text\(|\.write_bytes\(|(?<![\w.])open\([^)]*['\"][wax]b?['\"]|\.open\(['\"][wax]|"
    r"json\.dump\(|\.tofile\(|"
    r"np\.savez?(_compressed)?\((?!stream\b)"  # numpy may write only into an atomic_write stream
)


def test_every_file_the_packages_write_goes_through_fileio() -> None:
    """The class, not the instances: no module but fileio opens a file for writing."""
    offenders = []
    for root in (REPO / "core" / "kernloom", *(REPO / "plugins").glob("*/kernloom_*")):
        for source in root.rglob("*.py"):
            if source.name == "fileio.py":
                continue
            for number, line in enumerate(source.read_text().splitlines(), 1):
                if _WRITERS.search(line):
                    offenders.append(f"{source.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []
