"""Subnormals flushed to zero while kernels run, as in TensorFlow's CPU kernels.

TensorFlow runs its CPU kernels under ``port::ScopedFlushDenormal``: on x86 it sets the
MXCSR bits FTZ (results too small for a normal float become zero) and DAZ (subnormal
inputs read as zero) around the work, so ``log(1e-40f)`` is ``-inf``, ``1e-40f * 1`` is 0
and ``sign(1e-40f)`` is 0. numpy's loops, libm and torch's CPU kernels compute with the
same SSE/AVX unit and obey the same bits, so setting them on the thread that runs the
kernels gives TensorFlow's answers without a pass over any array.

MXCSR is per thread and Python has no way to set it, so this module maps a page of
executable memory holding three tiny functions (System V x86-64 calling convention):

- ``flush() -> old``: ``stmxcsr``; ``old |= FTZ | DAZ``; ``ldmxcsr``; returns the old value;
- ``clear()``: both bits off again (how a scope ends on a thread that had neither: no
  argument to convert, the cheapest call);
- ``restore(old)``: ``ldmxcsr old`` (a thread that had only one of the two bits);
- ``read() -> current``: ``stmxcsr`` (for tests and diagnostics).

Everything else in MXCSR (rounding mode, exception masks) is kept. Where this cannot work
(not x86-64, not a System V platform, or the system refuses an executable mapping) the
scope does nothing, ``FLUSH_SUPPORTED`` is False and ``UNSUPPORTED_REASON`` says why:
kernels then compute with IEEE subnormals, a documented deviation from TensorFlow.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
from collections.abc import Callable
from typing import Final, final

__all__ = [
    "FLUSH_BITS",
    "FLUSH_SUPPORTED",
    "UNSUPPORTED_REASON",
    "FlushDenormals",
    "end_flush",
    "read_mxcsr",
    "set_flush_permanently",
    "start_flush",
]

FLUSH_BITS: Final = 0x8040
"""MXCSR's FTZ (bit 15) and DAZ (bit 6)."""

# stmxcsr [rsp-4]; mov eax, [rsp-4]; or dword [rsp-4], 0x8040; ldmxcsr [rsp-4]; ret
# (the 128 bytes below rsp are the System V red zone: a leaf function may use them)
_FLUSH_CODE: Final = bytes.fromhex("0fae5c24fc8b4424fc814c24fc408000000fae5424fcc3")
# stmxcsr [rsp-4]; and dword [rsp-4], ~0x8040; ldmxcsr [rsp-4]; ret
_CLEAR_CODE: Final = bytes.fromhex("0fae5c24fc816424fcbf7fffff0fae5424fcc3")
# mov [rsp-4], edi; ldmxcsr [rsp-4]; ret
_RESTORE_CODE: Final = bytes.fromhex("897c24fc0fae5424fcc3")
# stmxcsr [rsp-4]; mov eax, [rsp-4]; ret
_READ_CODE: Final = bytes.fromhex("0fae5c24fc8b4424fcc3")

_Getter = Callable[[], int]
_Setter = Callable[[int], None]
_Action = Callable[[], None]


def _load() -> tuple[_Getter, _Action, _Setter, _Getter, mmap.mmap | None, str]:
    """The three functions and the page that holds them, or why they cannot be had."""
    if platform.machine().lower() not in ("x86_64", "amd64") or os.name != "posix":
        reason = (
            f"flushing subnormals needs x86-64 with the System V ABI; this is "
            f"{platform.machine() or 'an unknown machine'} ({os.name})"
        )
        return _no_flush, _no_clear, _no_restore, _no_read, None, reason
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError, AttributeError) as exc:  # W^X systems refuse the mapping
        reason = f"no executable page for MXCSR: {exc}"
        return _no_flush, _no_clear, _no_restore, _no_read, None, reason
    codes = (_FLUSH_CODE, _CLEAR_CODE, _RESTORE_CODE, _READ_CODE)
    page.write(b"".join(codes))
    base = ctypes.addressof(ctypes.c_char.from_buffer(page))
    starts = [base + sum(len(c) for c in codes[:i]) for i in range(len(codes))]
    getter = ctypes.CFUNCTYPE(ctypes.c_uint32)
    flush = getter(starts[0])
    clear = ctypes.CFUNCTYPE(None)(starts[1])
    restore = ctypes.CFUNCTYPE(None, ctypes.c_uint32)(starts[2])
    read = getter(starts[3])
    return flush, clear, restore, read, page, ""


def _no_flush() -> int:
    return FLUSH_BITS  # "already flushing": the scope then restores nothing


def _no_clear() -> None:
    pass


def _no_restore(value: int) -> None:
    del value


def _no_read() -> int:
    return 0


_flush, _clear, _restore, _read, _PAGE, UNSUPPORTED_REASON = _load()
FLUSH_SUPPORTED: Final = not UNSUPPORTED_REASON
"""True where kernels run with subnormals flushed (x86-64, an executable page allowed)."""


@final
class FlushDenormals:
    """Sets FTZ and DAZ on this thread on entry, and puts back what the thread had on exit.

    Meant to be entered once around many kernels (a device's ``compute_scope``): each
    entry costs one foreign call, and one more on exit when the thread was not already
    flushing. A thread that already flushes (a worker thread kernloom keeps flushing, or a
    caller who set the bits) is left as it was. Each use makes a new one, so threads and
    nested scopes never share the saved value.
    """

    __slots__ = ("_saved",)

    def __enter__(self) -> None:
        self._saved = _flush()

    def __exit__(self, *exc_info: object) -> None:
        end_flush(self._saved)


start_flush: Final[_Getter] = _flush
"""Set FTZ and DAZ on this thread; returns what to give ``end_flush`` (for a scope that
enters other state too and would pay for a second context object)."""


def end_flush(saved: int) -> None:
    """Put back what ``start_flush`` found: nothing to do on a thread that was flushing."""
    kept = saved & FLUSH_BITS
    if not kept:
        _clear()
    elif kept != FLUSH_BITS:
        _restore(saved)


def set_flush_permanently() -> None:
    """Flush subnormals on this thread from now on: for threads kernloom owns (the
    intra-op pool's workers), which never run user code afterwards."""
    _flush()


def read_mxcsr() -> int:
    """This thread's MXCSR (0 where ``FLUSH_SUPPORTED`` is False)."""
    return _read()
