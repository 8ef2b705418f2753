"""The CPU device's compute scope: numpy's floating-point warnings off, as in TensorFlow
(1/0 is inf, log(-1) is nan, and nothing is printed or raised).

A step enters the scope once around all its kernels, so its cost is paid per run. With
``np.errstate(all="ignore")`` that cost is about 2 us, and about 15 us right after a BLAS
call has pushed the interpreter out of the CPU's caches, which in an MLP happens before
every step. numpy 2 keeps the error state in one context variable, and ``np.errstate``
builds a new state object and sets that variable. ``IgnoreFloatErrors`` sets it to an
"ignore everything" state made once per state it starts from (the interpreter's default,
in practice), which is a third of the cost. numpy versions without that variable (1.x, or
a later one that moves it) get ``np.errstate`` itself.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final, final

import numpy as np

__all__ = ["ignore_float_errors"]

try:  # numpy >= 2.0
    from numpy._core._multiarray_umath import (  # type: ignore[import-not-found]
        _extobj_contextvar,
        _make_extobj,
    )
except ImportError:  # pragma: no cover - numpy 1.x
    _extobj_contextvar = None
    _make_extobj = None

_STATE: Final[Any] = _extobj_contextvar
_DEFAULT: Final[Any] = None if _STATE is None else _STATE.get()
"""The error state a thread starts with."""
_IGNORE_FROM_DEFAULT: Final[Any] = None if _STATE is None else _make_extobj(all="ignore")
"""``_DEFAULT`` with every floating-point error ignored (its buffer size and error
callback kept, as ``np.errstate`` keeps them)."""


@final
class IgnoreFloatErrors:
    """``np.errstate(all="ignore")`` for numpy 2: the same state, set more cheaply. Each
    use makes a new one, so threads and nested scopes never share a token."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        current = _STATE.get()
        # Not the default (the caller has an errstate or a buffer size of their own): build
        # the ignoring state from theirs, exactly as np.errstate would.
        ignore = _IGNORE_FROM_DEFAULT if current is _DEFAULT else _make_extobj(all="ignore")
        self._token = _STATE.set(ignore)

    def __exit__(self, *exc_info: object) -> None:
        _STATE.reset(self._token)


def ignore_float_errors() -> contextlib.AbstractContextManager[object]:
    """A context in which numpy neither warns nor raises on floating-point errors."""
    if _STATE is None:
        return np.errstate(all="ignore")
    return IgnoreFloatErrors()
