"""The ``checkpoint`` state file: which checkpoints a directory holds, the newest last.

Modelled on TensorFlow's ``checkpoint_management`` (``tf.compat.v1.train``): every
``Saver.save`` rewrites a small text file, ``checkpoint`` by default, in the directory of
the checkpoint it wrote. The file is TensorFlow's ``CheckpointState`` in protobuf text
format, so it reads like TensorFlow's (and TensorFlow's reader accepts ours)::

    model_checkpoint_path: "model-3"
    all_model_checkpoint_paths: "model-2"
    all_model_checkpoint_paths: "model-3"

A checkpoint inside the directory is written relative to it (TensorFlow's
``save_relative_paths=True``), so the directory can be moved or copied and still restore;
one elsewhere is written as an absolute path. Reading joins a relative path to the
directory, as TensorFlow does. The file is written atomically
(:func:`kernloom.fileio.atomic_write_text`): a reader sees the old state or the new one.

``latest_checkpoint(directory)`` is what a training script restores from after a restart.
It follows TensorFlow where TensorFlow logs and carries on: a state file that cannot be
read or parsed, or one naming a file that no longer exists, gives a ``RuntimeWarning``
(naming the file and the fix) and None, so that the script starts afresh instead of
failing; a state file that parses but names no checkpoint is an error, as in TensorFlow.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from kernloom.errors import InvalidArgumentError
from kernloom.fileio import FileReadError, atomic_write_text, read_text_bounded

__all__ = ["CheckpointState", "checkpoint_exists", "get_checkpoint_state", "latest_checkpoint"]

STATE_FILENAME: Final = "checkpoint"
"""The state file's name when ``latest_filename`` is None, as in TensorFlow."""
_MAX_STATE_BYTES: Final = 16 << 20
"""A state file larger than this is not one a saver wrote: refuse it before parsing."""
_MODEL: Final = "model_checkpoint_path"
_ALL: Final = "all_model_checkpoint_paths"
_TIMESTAMPS: Final = frozenset({"all_model_checkpoint_timestamps", "last_preserved_timestamp"})
"""Fields TensorFlow 2's CheckpointManager adds; read and ignored (kernloom keeps no times)."""

_PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class CheckpointState:
    """What a state file records: the newest checkpoint and every kept one, oldest first.

    Paths are as ``get_checkpoint_state`` returns them: joined to the directory when the
    file holds them relative to it, so each can be passed to ``Saver.restore`` as is."""

    model_checkpoint_path: str
    all_model_checkpoint_paths: tuple[str, ...] = ()


# -- arguments ------------------------------------------------------------------------------


def state_file_name(latest_filename: object, caller: str) -> str:
    """``latest_filename`` checked: a plain file name (the state file lives beside the
    checkpoints, so a path in it would write or read somewhere else)."""
    if latest_filename is None:
        return STATE_FILENAME
    if not isinstance(latest_filename, str):
        raise TypeError(
            f"{caller}: latest_filename must be a file name (str) or None, got "
            f"{type(latest_filename).__name__}"
        )
    separators = {"/", os.sep, os.altsep or "/"}
    if (
        latest_filename in {"", os.curdir, os.pardir}
        or any(s in latest_filename for s in separators)
        or "\0" in latest_filename
    ):
        raise InvalidArgumentError(
            f"{caller}: latest_filename={latest_filename!r} must be a plain file name, "
            f"without a directory (the state file is kept in the checkpoints' own directory); "
            f"pass e.g. latest_filename='checkpoint'"
        )
    return latest_filename


def _directory(checkpoint_dir: object, caller: str) -> str:
    """``checkpoint_dir`` as a str; a file there is an error (a path to a checkpoint file
    passed where its directory belongs is the likely mistake)."""
    if not isinstance(checkpoint_dir, str | os.PathLike):
        raise TypeError(
            f"{caller}: checkpoint_dir must be a str or os.PathLike, got "
            f"{type(checkpoint_dir).__name__}"
        )
    directory = os.fspath(checkpoint_dir)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise InvalidArgumentError(
            f"{caller}: checkpoint_dir={directory!r} is a file, not a directory; pass the "
            f"directory the checkpoints are saved in (os.path.dirname of a checkpoint's path)"
        )
    return directory


def checkpoint_exists(checkpoint_path: _PathLike) -> bool:
    """Whether ``checkpoint_path`` names an existing checkpoint file (TensorFlow's
    ``checkpoint_exists``; a kernloom checkpoint is one file, so this is a file test)."""
    if not isinstance(checkpoint_path, str | os.PathLike):
        raise TypeError(
            f"kl.train.checkpoint_exists: checkpoint_path must be a str or os.PathLike, got "
            f"{type(checkpoint_path).__name__}"
        )
    return os.path.isfile(checkpoint_path)


# -- writing --------------------------------------------------------------------------------


_NAMED_ESCAPES: Final = {
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    '"': '\\"',
    "'": "\\'",
    "\\": "\\\\",
}


def _c_escape(text: str) -> str:
    """``text`` as protobuf's text format writes a string field (``CEscape`` in UTF-8
    mode, ``MessageToString``'s default): quotes, backslashes and ASCII control characters
    escaped, other characters as they are. A byte of a file name that is not UTF-8 (a
    surrogate escape, as ``os.fsdecode`` gives) becomes an octal escape of that byte."""
    out = []
    for char in text:
        code = ord(char)
        if char in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\{code:03o}")
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\{code - 0xDC00:03o}")
        else:
            out.append(char)
    return "".join(out)


def _as_recorded(path: str, directory: str) -> str:
    """``path`` (absolute) as the state file in ``directory`` (absolute) records it:
    relative when inside the directory, else absolute."""
    try:
        relative = os.path.relpath(path, directory)
    except ValueError:  # another drive (Windows): no relative path
        return path
    inside = relative != os.pardir and not relative.startswith(os.pardir + os.sep)
    return relative if inside else path


def format_checkpoint_state(model_checkpoint_path: str, all_paths: Sequence[str]) -> str:
    """The state file's text, as TensorFlow's ``text_format.MessageToString`` writes it."""
    lines = [f'{_MODEL}: "{_c_escape(model_checkpoint_path)}"']
    lines += [f'{_ALL}: "{_c_escape(p)}"' for p in all_paths]
    return "\n".join(lines) + "\n"


def state_file_path(save_dir: str, latest_filename: str) -> str:
    """Where the state file of checkpoints saved in ``save_dir`` lives."""
    return os.path.join(save_dir, latest_filename)


def write_checkpoint_state(save_dir: str, all_paths: Sequence[str], latest_filename: str) -> None:
    """Record ``all_paths`` (absolute, oldest first; the last is the newest) in the state
    file of ``save_dir``, atomically."""
    directory = os.path.abspath(save_dir or os.curdir)
    recorded = [_as_recorded(p, directory) for p in all_paths]
    text = format_checkpoint_state(recorded[-1], recorded)
    atomic_write_text(state_file_path(save_dir, latest_filename), text)


# -- reading --------------------------------------------------------------------------------


class _SyntaxError(ValueError):
    """The state file is not a CheckpointState in text format."""


_TOKEN: Final = re.compile(
    r"""(?P<space>\s+)|(?P<comment>\#[^\n]*)
    |(?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    |(?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?)
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<punct>[:;,])""",
    re.VERBOSE,
)
_ESCAPE: Final = re.compile(
    r"\\(?:(?P<octal>[0-7]{1,3})|x(?P<hex>[0-9a-fA-F]{1,2})|u(?P<u4>[0-9a-fA-F]{4})"
    r"|U(?P<u8>[0-9a-fA-F]{8})|(?P<char>.))",
    re.DOTALL,
)
_SIMPLE_ESCAPES: Final = {
    "n": b"\n", "t": b"\t", "r": b"\r", "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v",
    "\\": b"\\", "'": b"'", '"': b'"', "?": b"?",
}  # fmt: skip


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """(kind, text, line) of each token, spaces and comments left out."""
    position, line = 0, 1
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise _SyntaxError(f"line {line}: unexpected {text[position : position + 20]!r}")
        kind = match.lastgroup or ""
        if kind not in {"space", "comment"}:
            yield kind, match.group(), line
        line += match.group().count("\n")
        position = match.end()


def _unescape(literal: str, line: int) -> bytes:
    """A quoted string token's bytes, C escapes decoded as protobuf's text format does."""

    def one(match: re.Match[str]) -> str:
        if match["octal"] is not None:
            value = int(match["octal"], 8)
        elif match["hex"] is not None:
            value = int(match["hex"], 16)
        elif match["u4"] is not None or match["u8"] is not None:
            return chr(int(match["u4"] or match["u8"], 16)).encode().decode("latin-1")
        elif match["char"] in _SIMPLE_ESCAPES:
            value = _SIMPLE_ESCAPES[match["char"]][0]
        else:
            raise _SyntaxError(f"line {line}: unknown escape \\{match['char']}")
        if value > 0xFF:
            raise _SyntaxError(f"line {line}: octal escape \\{match['octal']} is over 255")
        return chr(value)

    # Characters stand for their UTF-8 bytes; an escape stands for one byte. Latin-1
    # carries both through one str (each char < 256 is that byte).
    as_bytes = literal[1:-1].encode("utf-8").decode("latin-1")
    return _ESCAPE.sub(one, as_bytes).encode("latin-1")


def _field_values(text: str) -> Iterator[tuple[str, str | None, int]]:
    """(field, value, line) per field in the text: the string's text for a path field,
    None for a timestamp field (checked to be a number and dropped)."""
    tokens = list(_tokens(text))
    i = 0
    while i < len(tokens):
        kind, field, line = tokens[i]
        if kind == "punct" and field in {";", ","}:
            i += 1
            continue
        if kind != "name" or field not in {_MODEL, _ALL, *_TIMESTAMPS}:
            raise _SyntaxError(f"line {line}: expected a CheckpointState field, got {field!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][1] != ":":
            raise _SyntaxError(f"line {line}: expected ':' after {field}")
        i += 2
        if field in _TIMESTAMPS:
            if i >= len(tokens) or tokens[i][0] not in {"number", "name"}:
                raise _SyntaxError(f"line {line}: {field} must be a number")
            yield field, None, line
            i += 1
            continue
        pieces: list[bytes] = []
        while i < len(tokens) and tokens[i][0] == "string":  # "a" "b" is "ab", as in C
            pieces.append(_unescape(tokens[i][1], tokens[i][2]))
            i += 1
        if not pieces:
            raise _SyntaxError(f"line {line}: {field} must be a quoted string")
        # Bytes that are not UTF-8 stand for themselves, as in a POSIX file name.
        yield field, b"".join(pieces).decode("utf-8", "surrogateescape"), line


def parse_checkpoint_state(text: str) -> CheckpointState:
    """The paths a state file's text holds, as written (a later ``model_checkpoint_path``
    replaces an earlier one, as protobuf's ``text_format.Merge`` does)."""
    model = ""
    kept: list[str] = []
    for field, value, _ in _field_values(text):
        if field == _MODEL and value is not None:
            model = value
        elif field == _ALL and value is not None:
            kept.append(value)
    return CheckpointState(model, tuple(kept))


def _warn_ignored(state_file: str, problem: str) -> None:
    warnings.warn(
        f"{state_file}: {problem}; checkpoint state ignored (as TensorFlow does). Delete the "
        f"file, or save a checkpoint in that directory to rewrite it",
        RuntimeWarning,
        stacklevel=_CALLER,
    )


_CALLER: Final = 5
"""The warning's stack level that points at the caller of ``get_checkpoint_state`` or
``latest_checkpoint`` (warn, _read_state_file, _checkpoint_state, the public function)."""


def _read_state_file(state_file: str) -> CheckpointState | None:
    """The state file parsed, or None (with a warning) when it cannot be read or parsed."""
    try:
        text = read_text_bounded(state_file, max_bytes=_MAX_STATE_BYTES)
        return parse_checkpoint_state(text)
    except FileReadError as exc:
        _warn_ignored(state_file, f"cannot be read ({exc.problem})")
    except _SyntaxError as exc:
        _warn_ignored(state_file, f"not a CheckpointState in text format ({exc})")
    return None


def _joined(directory: str, path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(directory, path)


def _checkpoint_state(
    checkpoint_dir: object, latest_filename: object, caller: str
) -> tuple[str, CheckpointState | None]:
    """(the state file's path, its state with paths joined to the directory, or None)."""
    directory = _directory(checkpoint_dir, caller)
    state_file = state_file_path(directory, state_file_name(latest_filename, caller))
    if not os.path.lexists(state_file):
        return state_file, None
    state = _read_state_file(state_file)
    if state is None:
        return state_file, None
    if not state.model_checkpoint_path:
        raise InvalidArgumentError(
            f"{state_file}: invalid checkpoint state, it names no {_MODEL}; delete the file, "
            f"or save a checkpoint in {directory or os.curdir!r} to rewrite it"
        )
    return state_file, CheckpointState(
        _joined(directory, state.model_checkpoint_path),
        tuple(_joined(directory, p) for p in state.all_model_checkpoint_paths),
    )


def get_checkpoint_state(
    checkpoint_dir: _PathLike, latest_filename: str | None = None
) -> CheckpointState | None:
    """The state file of ``checkpoint_dir``, or None when there is none (TensorFlow's
    ``get_checkpoint_state``): relative paths come back joined to the directory.

    A file that cannot be read or parsed is a ``RuntimeWarning`` and None, as TensorFlow
    logs and returns None; one that parses but names no checkpoint is an
    ``InvalidArgumentError`` (TensorFlow's ``ValueError``)."""
    return _checkpoint_state(checkpoint_dir, latest_filename, "kl.train.get_checkpoint_state")[1]


def latest_checkpoint(checkpoint_dir: _PathLike, latest_filename: str | None = None) -> str | None:
    """The newest checkpoint recorded in ``checkpoint_dir``'s state file, ready for
    ``Saver.restore``; None when there is no state file, or (with a ``RuntimeWarning``,
    as TensorFlow logs an error) when the file it names no longer exists. TensorFlow
    does not fall back to an older checkpoint then, and neither does this."""
    state_file, state = _checkpoint_state(
        checkpoint_dir, latest_filename, "kl.train.latest_checkpoint"
    )
    if state is None:
        return None
    if not checkpoint_exists(state.model_checkpoint_path):
        warnings.warn(
            f"{state_file}: the newest checkpoint it names, {state.model_checkpoint_path!r}, "
            f"does not exist; no checkpoint to restore (save again to rewrite the state file)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return state.model_checkpoint_path
