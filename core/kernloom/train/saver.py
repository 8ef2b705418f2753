"""``kl.train.Saver``: save a session's variables to a checkpoint file and restore them.

Modelled on TensorFlow's ``tf.compat.v1.train.Saver``: the saver is built once for a graph
(it adds the nodes that read every variable and assign it from a placeholder, under the
name scope ``save``), then ``saver.save(sess, path)`` and ``saver.restore(sess, path)``
work on any session of that graph::

    saver = kl.train.Saver(max_to_keep=5)  # every kl.Variable of the default graph
    saver.save(sess, "ckpt/model", global_step=step)  # writes ckpt/model-<step>
    saver.restore(other_sess, kl.train.latest_checkpoint("ckpt"))

Checkpoint bookkeeping follows TensorFlow's: each ``save`` records the path in the state
file ``checkpoint`` of the checkpoint's directory (``kernloom.train.checkpoint_management``;
``latest_checkpoint`` reads it back), and once the saver has written more than
``max_to_keep`` checkpoints it deletes its oldest, after the state file no longer lists
them. ``save(..., write_state=False)`` does neither.

The file is a numpy ``.npz`` archive, read with ``allow_pickle=False`` (loading a
checkpoint never runs code): one member per variable (``v0``, ``v1``, ...) and a manifest
member, UTF-8 JSON in a uint8 array, that lists each variable's name, member, dtype and
shape. ``save`` writes to a temporary file in the same directory, syncs it to disk and
renames it over ``path``, so a crash or a full disk leaves either the old checkpoint or
the new one, never a torn file. ``restore`` checks the whole checkpoint against the
variables first -- names, dtypes, shapes -- and fails with one error listing every
mismatch, before any variable changes. Variables in the checkpoint that the saver does
not cover are ignored, as in TensorFlow (restore part of a model from a whole one).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import struct
import sys
import warnings
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any, Final, NamedTuple, final

import numpy as np

from kernloom.dtypes import all_dtypes, as_dtype
from kernloom.errors import (
    InvalidArgumentError,
    NotFoundError,
)
from kernloom.fileio import FileReadError, atomic_write_with, open_regular_file
from kernloom.graph.builder import apply_op, placeholder
from kernloom.graph.graph import Graph, Node
from kernloom.graph.tensor import Tensor
from kernloom.graph.variables import Variable, existing_variables
from kernloom.runtime.session import Session
from kernloom.shapes import TensorShape
from kernloom.train.checkpoint_management import (
    checkpoint_exists,
    state_file_name,
    state_file_path,
    write_checkpoint_state,
)

__all__ = ["CHECKPOINT_FORMAT", "Saver", "read_checkpoint_manifest"]

CHECKPOINT_FORMAT: Final = "kernloom-checkpoint"
_VERSION: Final = 1
_MANIFEST: Final = "__manifest__"
_UNREADABLE: Final = (
    OSError,
    ValueError,
    EOFError,
    zipfile.BadZipFile,
    NotImplementedError,
    struct.error,
    OverflowError,
    MemoryError,
)
"""What numpy's and zipfile's readers raise for a damaged or crafted file."""
_DTYPE_NAMES: Final = frozenset(d.name for d in all_dtypes())
_KL_SPELLING: Final = {"bool": "bool_"}
"""A dtype's attribute in ``kl`` where it is not its name (``bool`` is ``kl.bool_``)."""
_MAX_MANIFEST_BYTES: Final = 64 << 20
"""A manifest larger than this is not one we wrote: refuse it before decoding."""

Array = np.ndarray[Any, Any]


@final
class _Slot:
    """One variable as the saver sees it: its checkpoint name and its save/restore nodes."""

    __slots__ = ("assign", "initialized", "name", "read", "value", "variable")

    def __init__(self, name: str, variable: Variable) -> None:
        self.name = name
        self.variable = variable
        graph = variable.graph
        safe = variable.name
        self.read = variable.value()
        self.initialized = variable.is_initialized()
        self.value = placeholder(
            variable.dtype, variable.shape, name=f"{safe}/restore_value", graph=graph
        )
        node = apply_op(
            "AssignVariableOp",
            [variable.handle, self.value],
            {"dtype": variable.dtype},
            name=f"{safe}/restore",
        )
        assert isinstance(node, Node)
        self.assign = node


def _named_variables(
    var_list: Sequence[Variable] | Mapping[str, Variable] | None, graph: Graph | None
) -> tuple[Graph, list[tuple[str, Variable]]]:
    if var_list is None:
        target, found = existing_variables(
            graph,
            "kl.train.Saver()",
            " to save. Build the saver inside `with graph.as_default():` after the "
            "variables, or pass var_list=",
        )
        return target, [(v.name, v) for v in found]
    if isinstance(var_list, Mapping):
        named = list(var_list.items())
    elif isinstance(var_list, list | tuple):
        named = [(v.name if isinstance(v, Variable) else "", v) for v in var_list]
    else:
        raise TypeError(
            f"kl.train.Saver: var_list must be a list of kl.Variable, a dict from checkpoint "
            f"names to kl.Variable, or None; got {type(var_list).__name__}"
        )
    if not named:
        raise InvalidArgumentError("kl.train.Saver: var_list is empty: nothing to save")
    for name, variable in named:
        if not isinstance(variable, Variable):
            raise TypeError(
                f"kl.train.Saver: var_list holds {variable!r} ({type(variable).__name__}); "
                f"every entry must be a kl.Variable"
            )
        if not isinstance(name, str) or not name:
            raise TypeError(f"kl.train.Saver: checkpoint name {name!r} must be a non-empty string")
    target = graph if graph is not None else named[0][1].graph
    elsewhere = [name for name, v in named if v.graph is not target]
    if elsewhere:
        raise InvalidArgumentError(
            f"kl.train.Saver: variable(s) {elsewhere} are in another graph than "
            + ("graph=" if graph is not None else f"the variable {named[0][0]!r}")
            + "; a saver covers the variables of one graph: build one saver per graph"
        )
    names = [name for name, _ in named]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(
            f"kl.train.Saver: checkpoint names used twice: {twice}; list each variable once"
        )
    # One variable under two names would be restored twice, from two values, in one step.
    by_variable: dict[int, list[str]] = {}
    for name, variable in named:
        by_variable.setdefault(id(variable), []).append(name)
    for _, variable in named:
        aliases = by_variable[id(variable)]
        if len(aliases) > 1:
            raise InvalidArgumentError(
                f"kl.train.Saver: the kl.Variable {variable.name!r} is in var_list under "
                f"{len(aliases)} names {aliases}; give each variable one checkpoint name"
            )
    return target, named


def _step_number(session: Session, global_step: object) -> int:
    """``global_step`` as the int TensorFlow's Saver appends: an int, or a scalar integer
    tensor (a variable's value included) evaluated in ``session``."""
    value: Any = global_step
    if isinstance(value, Variable):
        value = value.value()
    if isinstance(value, Tensor):
        value = session.run(value)
    array = np.asarray(value)
    if array.ndim != 0 or array.dtype.kind not in "iu" or isinstance(global_step, bool):
        raise InvalidArgumentError(
            f"Saver.save: global_step must be an integer or a scalar integer tensor, got "
            f"{global_step!r}"
        )
    return int(array)


def _as_path(save_path: object, caller: str) -> str:
    """``save_path`` as the string it is: TensorFlow treats it as a prefix, so a trailing
    separator is kept (``"run/"`` is the directory ``run``, never a file named ``run``)."""
    if save_path is None:
        raise InvalidArgumentError(
            f"{caller}: save_path is None; pass the checkpoint's file name (the path "
            f"saver.save(session, path) returned)"
        )
    if not isinstance(save_path, str | os.PathLike):
        raise TypeError(
            f"{caller}: save_path must be a str or os.PathLike, got {type(save_path).__name__}"
        )
    path = os.fspath(save_path)
    if not isinstance(path, str):
        raise TypeError(
            f"{caller}: save_path must be a str or os.PathLike of str, got bytes {path!r}; "
            f"decode it with os.fsdecode"
        )
    return path


def _names_a_directory(path: str) -> bool:
    """Whether ``path`` can only name a directory: it is empty, ends in a separator, or
    ends in ``.`` or ``..``."""
    return os.path.basename(path) in {"", os.curdir, os.pardir}


def _not_a_file(caller: str, path: str) -> str:
    """The start of the error for a ``save_path`` that names no file."""
    what = "is empty" if not path else "names a directory"
    return f"{caller}: save_path={path!r} {what}, not a checkpoint file"


def _checked_max_to_keep(max_to_keep: object) -> int:
    """``max_to_keep`` as an int >= 0 (None is 0: keep every checkpoint, as TensorFlow)."""
    if max_to_keep is None:
        return 0
    if isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int | np.integer):
        raise TypeError(
            f"kl.train.Saver: max_to_keep must be an int or None, got "
            f"{type(max_to_keep).__name__} {max_to_keep!r}"
        )
    index = int(max_to_keep)
    if index < 0:
        raise InvalidArgumentError(
            f"kl.train.Saver: max_to_keep={index} is negative; pass how many recent "
            f"checkpoints to keep (5 is the default), or 0 or None to keep them all"
        )
    return index


class _Kept(NamedTuple):
    """A checkpoint the saver wrote: its path as ``save`` returned it, and that path made
    absolute when written (to compare and delete it even after a change of directory)."""

    path: str
    absolute: str


def _kept(path: str | os.PathLike[str]) -> _Kept:
    return _Kept(os.fspath(path), os.path.abspath(path))


def _delete_checkpoint(kept: _Kept) -> None:
    """Remove an old checkpoint the state file no longer lists. One already gone is fine;
    one that cannot be removed is a warning, not an error: the new checkpoint and the state
    file are written, and TensorFlow likewise logs and carries on."""
    try:
        os.unlink(kept.absolute)
    except FileNotFoundError:
        pass
    except OSError as exc:
        warnings.warn(
            f"{kept.path}: could not delete this old checkpoint ({exc.strerror or exc}); it "
            f"is no longer listed in the checkpoint state, delete it by hand",
            RuntimeWarning,
            stacklevel=4,
        )


@final
class Saver:
    """Saves and restores ``var_list`` (every ``kl.Variable`` of ``graph``, or of the default
    graph, when None; a dict names them in the checkpoint, else their own names do).

    ``max_to_keep`` (default 5, as TensorFlow's): how many of the checkpoints this saver
    wrote stay on disk; after a save beyond it the oldest are deleted. 0 or None keeps them
    all, and then (as in TensorFlow) the state file lists only the newest and
    ``last_checkpoints`` stays empty. TensorFlow's ``keep_checkpoint_every_n_hours`` is
    left out: every checkpoint past the limit is deleted, however old."""

    def __init__(
        self,
        var_list: Sequence[Variable] | Mapping[str, Variable] | None = None,
        *,
        graph: Graph | None = None,
        max_to_keep: int | None = 5,
    ) -> None:
        self._max_to_keep = _checked_max_to_keep(max_to_keep)
        self._last: list[_Kept] = []
        self.graph, named = _named_variables(var_list, graph)
        with self.graph.name_scope("save"):
            self._slots = [_Slot(name, variable) for name, variable in named]
            with self.graph.control_dependencies([s.assign for s in self._slots]):
                self.restore_op: Node = self.graph.add_node("NoOp", [], {}, name="restore_all")

    @property
    def names(self) -> list[str]:
        """The variables' names in the checkpoint, in the saver's order."""
        return [slot.name for slot in self._slots]

    @property
    def max_to_keep(self) -> int:
        """How many recent checkpoints the saver keeps; 0 keeps every one."""
        return self._max_to_keep

    @property
    def last_checkpoints(self) -> list[str]:
        """The checkpoints this saver wrote and has not deleted, oldest first, as ``save``
        returned them (each can be passed to ``restore``)."""
        return [kept.path for kept in self._last]

    def recover_last_checkpoints(self, checkpoint_paths: Sequence[str | os.PathLike[str]]) -> None:
        """Adopt ``checkpoint_paths`` (oldest first) as the checkpoints this saver wrote,
        after a restart, so that ``max_to_keep`` counts and deletes them too; paths whose
        file no longer exists are left out (TensorFlow's ``recover_last_checkpoints``).
        Typically ``kl.train.get_checkpoint_state(dir).all_model_checkpoint_paths``."""
        if isinstance(checkpoint_paths, str | bytes | os.PathLike) or not isinstance(
            checkpoint_paths, Sequence
        ):
            raise TypeError(
                f"Saver.recover_last_checkpoints: checkpoint_paths must be a list of paths, "
                f"got {type(checkpoint_paths).__name__}; wrap one path in a list"
            )
        for path in checkpoint_paths:
            if not isinstance(path, str | os.PathLike):
                raise TypeError(
                    f"Saver.recover_last_checkpoints: each checkpoint path must be a str or "
                    f"os.PathLike, got {type(path).__name__} {path!r}"
                )
        recovered: list[_Kept] = []
        for kept in (_kept(p) for p in checkpoint_paths if checkpoint_exists(p)):
            recovered = [k for k in recovered if k.absolute != kept.absolute] + [kept]
        self._last = recovered

    def _check_session(self, sess: object, what: str) -> Session:
        if not isinstance(sess, Session):
            raise TypeError(f"Saver.{what}: sess must be a kl.Session, got {type(sess).__name__}")
        if sess.graph is not self.graph:
            raise InvalidArgumentError(
                f"Saver.{what}: the session runs another graph than the one this saver was "
                f"built for"
            )
        return sess

    # -- saving -----------------------------------------------------------------------------

    def save(
        self,
        sess: Session,
        save_path: str | os.PathLike[str],
        global_step: object = None,
        latest_filename: str | None = None,
        *,
        write_state: bool = True,
    ) -> str:
        """Write the variables' values in ``sess`` to ``save_path`` (atomically) and return
        the path. Every variable must be initialised. ``global_step`` (an int, or a scalar
        integer tensor or variable, read in ``sess``) is appended to ``save_path`` as a
        string, as TensorFlow's Saver does: ``save(sess, "model", global_step=3)`` writes
        ``model-3``, and ``save(sess, "run/", global_step=3)`` writes ``run/-3``, inside
        ``run/``. The directory must exist. Without ``global_step``, ``save_path`` is the
        file's name: one that names a directory (``""``, ``"."``, ``"run/"``) is an error.

        With ``write_state`` (the default) the path is then recorded in the state file
        ``latest_filename`` (``"checkpoint"`` when None) beside it, and the checkpoints
        beyond ``max_to_keep`` are deleted, in that order, so a failure deleting never
        loses the new checkpoint or the state."""
        session = self._check_session(sess, "save")
        prefix = _as_path(save_path, "Saver.save")
        latest = state_file_name(latest_filename, "Saver.save")
        if global_step is not None:
            # A string prefix, as TensorFlow's: "run/" with step 5 is "run/-5", in run/.
            path = f"{prefix}-{_step_number(session, global_step)}"
        elif _names_a_directory(prefix):
            where = " in it" if prefix else ""
            absent = (
                ""
                if os.path.isdir(prefix or os.curdir)
                else f"; directory {prefix!r} does not exist either: create it first"
            )
            raise InvalidArgumentError(
                f"{_not_a_file('Saver.save', prefix)}: a kernloom checkpoint is one file; pass "
                f"a file name{where}, e.g. save_path={os.path.join(prefix, 'model')!r}, or pass "
                f"global_step=, which is appended to save_path as TensorFlow does "
                f"({prefix + '-<step>'!r}){absent}"
            )
        else:
            path = prefix
        if write_state:
            self._check_state_file_is_free(path, latest)
        initialized = session.run([slot.initialized for slot in self._slots])
        missing = [s.name for s, ok in zip(self._slots, initialized, strict=True) if not ok]
        if missing:
            raise InvalidArgumentError(
                f"Saver.save({path!r}): variable(s) {missing} were never initialised in "
                f"this session; run their initializer (kl.variables_initializer()) first"
            )
        values: list[Array] = session.run([slot.read for slot in self._slots])
        arrays: dict[str, Array] = {}
        entries = []
        for index, (slot, value) in enumerate(zip(self._slots, values, strict=True)):
            key = f"v{index}"
            arrays[key] = value
            entries.append(
                {
                    "name": slot.name,
                    "key": key,
                    "dtype": as_dtype(value.dtype).name,
                    "shape": [int(d) for d in value.shape],
                }
            )
        manifest = {"format": CHECKPOINT_FORMAT, "version": _VERSION, "variables": entries}
        arrays[_MANIFEST] = np.frombuffer(json.dumps(manifest).encode("utf-8"), dtype=np.uint8)

        def write(f: IO[bytes]) -> None:
            # np.savez's layout (one .npy member per array), written without pickling.
            with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
                for key, array in arrays.items():
                    with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, array, allow_pickle=False)

        atomic_write_with(path, write)
        if write_state:
            self._record(path, latest)
        return path

    def _check_state_file_is_free(self, path: str, latest_filename: str) -> None:
        """Refuse, before writing anything, a save whose state file would overwrite the new
        checkpoint or one the state file lists (TensorFlow finds this only afterwards)."""
        state_file = os.path.abspath(state_file_path(os.path.dirname(path), latest_filename))
        clashes = [path] if os.path.abspath(path) == state_file else []
        clashes += [k.path for k in self._last if k.absolute == state_file]
        if clashes:
            raise InvalidArgumentError(
                f"Saver.save: checkpoint {clashes[0]!r} is where the checkpoint state file "
                f"(latest_filename={latest_filename!r}) is written; save under another name "
                f"or pass another latest_filename"
            )

    def _record(self, path: str, latest_filename: str) -> None:
        """Write the state file listing the kept checkpoints, then delete the rest."""
        new = _kept(path)
        kept, evicted = self._after_saving(new)
        # The state lists the new checkpoint last, even when the saver keeps none.
        listed = [k for k in kept if k.absolute != new.absolute] + [new]
        write_checkpoint_state(os.path.dirname(path), [k.absolute for k in listed], latest_filename)
        self._last = kept
        for old in evicted:
            _delete_checkpoint(old)

    def _after_saving(self, new: _Kept) -> tuple[list[_Kept], list[_Kept]]:
        """(kept, to delete) once ``new`` is saved: a path saved again moves to the end,
        and the oldest beyond ``max_to_keep`` go (none when it is 0, as TensorFlow)."""
        if not self._max_to_keep:
            return self._last, []
        kept = [k for k in self._last if k.absolute != new.absolute] + [new]
        excess = max(0, len(kept) - self._max_to_keep)
        return kept[excess:], kept[:excess]

    # -- restoring --------------------------------------------------------------------------

    def restore(self, sess: Session, save_path: str | os.PathLike[str]) -> None:
        """Set the variables in ``sess`` to the values saved in ``save_path``; the
        checkpoint is checked against every variable before any of them changes."""
        session = self._check_session(sess, "restore")
        path = _checkpoint_file(save_path, "Saver.restore")
        values = _read_checkpoint(path, self._slots)
        feeds = {slot.value: value for slot, value in zip(self._slots, values, strict=True)}
        session.run(self.restore_op, feeds)

    def __repr__(self) -> str:
        return f"<kl.train.Saver of {len(self._slots)} variable(s)>"


# -- the file -------------------------------------------------------------------------------


def _checkpoint_file(save_path: object, caller: str) -> str:
    """``save_path`` checked to be able to name a checkpoint file, to read."""
    path = _as_path(save_path, caller)
    if _names_a_directory(path):
        raise InvalidArgumentError(
            f"{_not_a_file(caller, path)}; pass the path saver.save(session, ...) returned, "
            f"or kl.train.latest_checkpoint({path or os.curdir!r}) for the newest checkpoint "
            f"saved in that directory"
        )
    return path


def _checkpoint_error(path: str, problem: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{path}: not a valid kernloom checkpoint ({problem}); write one with "
        f"kl.train.Saver().save(session, path)"
    )


@contextlib.contextmanager
def _open(path: str) -> Iterator[Any]:
    """The checkpoint as numpy's lazy npz reader (no pickles), closed on leaving.

    A path that cannot be opened (missing, a directory, a FIFO, a name too long, no
    permission) is an error naming it, never a raw ``OSError`` or a hang."""
    with contextlib.ExitStack() as stack:
        try:
            f = stack.enter_context(open_regular_file(path, max_bytes=sys.maxsize))
        except FileReadError as exc:
            if exc.errno == errno.ENOENT:
                raise NotFoundError(
                    f"{path}: no such checkpoint file; check the path, or write one with "
                    f"saver.save(session, path)"
                ) from None
            raise
        try:
            archive = np.load(f, allow_pickle=False)
        except _UNREADABLE as exc:
            raise _checkpoint_error(path, f"{type(exc).__name__}: {exc}") from None
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise _checkpoint_error(path, "it is a single .npy array, not an .npz archive")
        with archive:
            yield archive


def _member(archive: Any, path: str, key: str) -> Array:
    try:
        value: Array = archive[key]
    except KeyError:
        raise _checkpoint_error(path, f"member {key!r} is missing") from None
    except _UNREADABLE as exc:
        raise _checkpoint_error(path, f"member {key!r}: {type(exc).__name__}: {exc}") from None
    return value


def read_checkpoint_manifest(save_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """What a checkpoint holds: one ``{"name", "key", "dtype", "shape"}`` per variable
    (validated: a malformed or hostile file is an ``InvalidArgumentError`` naming it)."""
    path = _checkpoint_file(save_path, "kl.train.read_checkpoint_manifest")
    with _open(path) as archive:
        return _manifest(archive, path)


def _manifest(archive: Any, path: str) -> list[dict[str, Any]]:
    raw = _member(archive, path, _MANIFEST)
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > _MAX_MANIFEST_BYTES:
        raise _checkpoint_error(path, "its manifest is not UTF-8 JSON bytes")
    try:
        manifest = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _checkpoint_error(path, f"its manifest is not JSON: {exc}") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != CHECKPOINT_FORMAT
        or not isinstance(manifest.get("variables"), list)
    ):
        raise _checkpoint_error(path, "its manifest does not describe a kernloom checkpoint")
    if manifest.get("version") != _VERSION:
        raise _checkpoint_error(
            path, f"format version {manifest.get('version')!r}; this kernloom reads {_VERSION}"
        )
    entries: list[dict[str, Any]] = []
    for entry in manifest["variables"]:
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("key"), str)
            and isinstance(entry.get("dtype"), str)
            and isinstance(entry.get("shape"), list)
            and all(type(d) is int and d >= 0 for d in entry["shape"])
        )
        if not ok:
            raise _checkpoint_error(path, f"malformed manifest entry {str(entry)[:200]}")
        entries.append(entry)
    names = [e["name"] for e in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise _checkpoint_error(path, f"its manifest lists {str(twice)[:200]} more than once")
    return entries


def _read_checkpoint(path: str, slots: Sequence[_Slot]) -> list[Array]:
    """The saved value of every slot, in order, after checking all of them."""
    with _open(path) as archive:
        entries = {e["name"]: e for e in _manifest(archive, path)}
        problems: list[str] = []
        missing: list[str] = []
        values: list[Array] = []
        for slot in slots:
            variable = slot.variable
            entry = entries.get(slot.name)
            if entry is None:
                missing.append(slot.name)
                problems.append(f"{slot.name!r}: not in the checkpoint")
                continue
            value = _member(archive, path, entry["key"])
            if entry["dtype"] not in _DTYPE_NAMES:
                raise _checkpoint_error(
                    path, f"member {entry['key']!r} is {str(entry['dtype'])[:40]}, not a kl dtype"
                )
            if value.dtype.kind not in "biufc" or value.dtype.name != entry["dtype"]:
                raise _checkpoint_error(
                    path,
                    f"member {entry['key']!r} is {value.dtype}, its manifest says {entry['dtype']}",
                )
            if list(value.shape) != entry["shape"]:
                raise _checkpoint_error(
                    path,
                    f"member {entry['key']!r} has shape {list(value.shape)}, its "
                    f"manifest says {entry['shape']}",
                )
            if entry["dtype"] != variable.dtype.name:
                spelled = _KL_SPELLING.get(entry["dtype"], entry["dtype"])
                problems.append(
                    f"{slot.name!r}: the checkpoint holds {entry['dtype']}, the variable is "
                    f"{variable.dtype.name} (create it with dtype=kl.{spelled})"
                )
            if not variable.shape.is_compatible_with(TensorShape(entry["shape"])):
                problems.append(
                    f"{slot.name!r}: the checkpoint holds shape {entry['shape']}, the variable "
                    f"has shape {variable.shape} (create it with shape {entry['shape']})"
                )
            values.append(value)
        held = sorted(entries)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        fix = (
            "Restore only what the checkpoint holds with kl.train.Saver(var_list=[...]) or "
            "kl.train.Saver({checkpoint_name: variable}), or build the variables as they "
            "were saved"
        )
        if missing:
            shown = held if len(held) <= 20 else [*held[:20], f"... {len(held) - 20} more"]
            fix += f"; the checkpoint holds {shown}"
        raise InvalidArgumentError(
            f"cannot restore {path}: {len(problems)} mismatch(es) between the checkpoint and "
            f"the saver's variables; nothing was restored:\n{listed}\n{fix}"
        )
    return values
