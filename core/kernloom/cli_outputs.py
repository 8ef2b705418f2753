"""Where ``kernloom run`` writes its results, decided and checked before anything runs.

Rules: every path is written exactly as given (``--out y`` writes ``y``, not ``y.npy``);
an existing file is replaced only with ``--force``; a directory, a missing directory or
two results aimed at one file are errors; every write is atomic (``kernloom.fileio``).
One ``--out FILE.npz`` takes every fetch, each as a member whose name is made safe
first: a graph may name a node ``a/../../x``, and a member name is a path to whoever
unpacks the archive.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from kernloom.cli_args import UsageError
from kernloom.fileio import atomic_write, parent_problem

__all__ = [
    "OutputPlan",
    "check_writable",
    "member_of",
    "npz_member",
    "plan_outputs",
    "write_npy",
    "write_npz",
]

Array = np.ndarray[Any, Any]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def npz_member(fetch: str) -> str:
    """The archive member for a fetch: ``y`` and ``y:0`` are ``y``, ``y:1`` is ``y_1``,
    ``layer0/matmul`` is ``layer0_matmul``; only letters, digits, ``_``, ``.`` and ``-``
    remain, so no member is a path, and none is made only of dots."""
    name = member_of(fetch)
    safe = _UNSAFE.sub("_", name)
    if not safe.strip("."):
        safe = "_" * max(1, len(safe))
    return safe


def member_of(fetch: str) -> str:
    return fetch.removesuffix(":0")


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """``archive``: one .npz for every fetch; ``files``: one path per fetch; neither: print."""

    archive: Path | None
    members: tuple[tuple[str, str], ...]
    """(member, fetch) for the archive: each tensor once."""
    files: tuple[Path, ...]


_EXAMPLE_NAMES: Final = {"--trace": "trace.json", "-o": "optimized.json"}
"""The file name a "give a file name" error suggests per flag (``y.npy`` otherwise)."""


def check_writable(path: Path, flag: str, *, force: bool, example: str | None = None) -> Path:
    """The path to write for ``flag``, refused now rather than after the run (or the
    optimization: ``kernloom optimize -o`` follows the same rules). ``example``: the file
    name a directory's error suggests (else the flag's usual one)."""
    if path.is_dir():
        example_path = path / (example or _EXAMPLE_NAMES.get(flag, "y.npy"))
        raise UsageError(f"{flag} {path}: is a directory; give a file name, e.g. {example_path}")
    parent = path.parent
    problem = parent_problem(path)
    if problem is not None:
        raise UsageError(f"{flag} {path}: {problem}")
    if path.exists() and not force:
        raise UsageError(f"{flag} {path}: the file exists; pass --force to replace it")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: cannot create files in {parent}: permission denied")
    return path


def _same_file(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def plan_outputs(
    fetches: Sequence[str], outs: Sequence[str], trace: str | None, *, force: bool
) -> OutputPlan:
    paths = [Path(p) for p in outs]
    targets: list[tuple[str, Path]] = []  # (what writes it, path), for the clash check
    if trace is not None:
        targets.append(("--trace", check_writable(Path(trace), "--trace", force=force)))
    plan = OutputPlan(None, (), ())
    if len(paths) == 1 and paths[0].suffix == ".npz":
        members: dict[str, str] = {}
        for fetch in fetches:
            member = npz_member(fetch)
            if member in members and members[member].removesuffix(":0") == member_of(fetch):
                continue  # the same tensor twice ("y", "y:0") is one member
            if member in members:
                raise UsageError(
                    f"fetches {members[member]!r} and {fetch!r} would both be member "
                    f"{member!r} of {paths[0]}; write them to separate .npy files"
                )
            members[member] = fetch
        archive = check_writable(paths[0], "--out", force=force)
        targets.append(("--out (every fetch)", archive))
        plan = OutputPlan(archive, tuple(members.items()), ())
    elif paths:
        if len(paths) != len(fetches):
            raise UsageError(
                f"{len(fetches)} --fetch but {len(paths)} --out: give one .npy per fetch, or "
                f"one .npz for all of them"
            )
        for fetch, path in zip(fetches, paths, strict=True):
            if path.suffix == ".npz":
                raise UsageError(
                    f"--out {path}: an .npz takes every fetch; give it as the only --out, or "
                    f"a .npy per fetch"
                )
            targets.append(
                (f"--out for fetch {fetch!r}", check_writable(path, "--out", force=force))
            )
        plan = OutputPlan(None, (), tuple(paths))
    for i, (first, a) in enumerate(targets):
        for second, b in targets[i + 1 :]:
            if _same_file(a, b):
                raise UsageError(f"{first} and {second} are both {b}; give each its own file")
    return plan


def write_npy(path: Path, value: Array) -> None:
    with atomic_write(path) as stream:
        np.save(stream, value, allow_pickle=False)


def write_npz(path: Path, members: Sequence[str], values: Sequence[Array]) -> None:
    """What ``numpy.savez`` writes, without its keyword arguments: a member may be named
    ``allow_pickle`` or ``file``."""
    with (
        atomic_write(path) as stream,
        zipfile.ZipFile(stream, "w", zipfile.ZIP_STORED, allowZip64=True) as archive,
    ):
        for member, value in zip(members, values, strict=True):
            with archive.open(f"{member}.npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, np.asanyarray(value), allow_pickle=False)
