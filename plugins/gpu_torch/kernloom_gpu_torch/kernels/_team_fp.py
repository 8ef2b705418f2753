"""torch's CPU threads under the calling thread's floating-point environment.

The numpy CPU device flushes subnormals (MXCSR's FTZ and DAZ, ``kernloom_cpu_numpy.
denormals``) on the thread that runs a step, and puts the thread's own setting back after
it. MXCSR is per thread. torch splits a large elementwise op over an OpenMP team of its
own: libgomp's threads, made once per calling thread and kept, each with the MXCSR it was
made with. Made outside a step (user code ran torch first), they never flush: a fused
``x * 1e20`` over 160 Ki subnormals gave zero on the caller's half and 1e-19 on the
worker's. Made inside a flushing step, they flush for ever after, in user code and in
``flush_denormals=False`` sessions too.

The same held for every torch kernel on the CPU device, oneDNN's products included: a
[256, 256] MatMul of 1e-39 by 1e20 at two threads gave 32,768 nonzero values of 65,536
where the team was made by user code before the step, and a ``flush_denormals=False``
session after a flushing one flushed half of them too.

``TeamEnvironment`` runs libc's ``fesetenv`` on every thread of that team through
``GOMP_parallel`` (what ``#pragma omp parallel`` compiles to): the caller's environment
before torch runs, the default one (no flushing, as a thread made outside any step has)
after. ``follow_step`` does that once per step and thread: the first torch kernel of a
flushing step with more than one thread shares the caller's environment, and the numpy
device's ``at_step_end`` gives the team the default one back when the step's kernels leave
the thread. Both together cost 2.5 µs with the team awake on an idle 2-core machine, 8 on
a loaded one (a sleeping team's wake-up, 20-40 µs, is paid once, by the first call, which
torch's first op would pay otherwise). Where that cannot work (no libgomp in the process,
not x86-64 Linux, another ATen backend, a device without ``at_step_end``) a flushing step
runs torch on one thread instead: the caller's own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, final

import torch

__all__ = ["TEAM_ENVIRONMENT", "TeamEnvironment", "follow_step"]

_DEFAULT_ENV: Final = ctypes.c_void_p(-1)
"""glibc's ``FE_DFL_ENV``: ``(const fenv_t *) -1``."""
_ENV_BYTES: Final = 64
"""Room for an ``fenv_t`` (32 bytes on x86-64 glibc), with a margin."""


@final
class TeamEnvironment:
    """libgomp's ``GOMP_parallel`` and libm's ``fegetenv``/``fesetenv``, resolved once:
    ``share`` before a kernel's torch calls, ``release`` after them."""

    __slots__ = ("_fegetenv", "_fesetenv", "_fesetenv_address", "_parallel")

    def __init__(self, gomp: ctypes.CDLL, libm: ctypes.CDLL) -> None:
        self._parallel: Callable[..., None] = gomp.GOMP_parallel
        self._parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        self._parallel.restype = None
        self._fegetenv: Callable[..., int] = libm.fegetenv
        self._fegetenv.argtypes = [ctypes.c_void_p]
        self._fesetenv: Callable[..., int] = libm.fesetenv
        self._fesetenv.argtypes = [ctypes.c_void_p]
        address = ctypes.cast(libm.fesetenv, ctypes.c_void_p).value
        if not address:
            raise OSError("fesetenv has no address")
        self._fesetenv_address = address

    def share(self, threads: int) -> ctypes.Array[ctypes.c_char]:
        """Give this thread's environment to every thread of its torch team (of
        ``threads``); returns it, for ``release``."""
        env = ctypes.create_string_buffer(_ENV_BYTES)
        self._fegetenv(env)
        self._parallel(self._fesetenv_address, ctypes.addressof(env), threads, 0)
        return env

    def release(self, env: ctypes.Array[ctypes.c_char], threads: int) -> None:
        """The team back to the default environment; this thread back to ``env`` (the
        parallel call ran ``fesetenv`` here too)."""
        self._parallel(self._fesetenv_address, _DEFAULT_ENV, threads, 0)
        self._fesetenv(env)


def _load() -> TeamEnvironment | None:
    """The team's OpenMP runtime and libm, or None where they cannot be reached."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return None  # MXCSR and glibc's FE_DFL_ENV are x86-64 Linux's
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None
    path = _loaded_openmp()
    libm_name = ctypes.util.find_library("m")
    if path is None or libm_name is None:
        return None
    try:
        gomp = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # torch's own copy
        return TeamEnvironment(gomp, ctypes.CDLL(libm_name))
    except (OSError, AttributeError):
        return None


def _loaded_openmp() -> str | None:
    """The path of the OpenMP runtime loaded into this process: the one in torch's own
    folder where there are several (another package may bring its own libgomp)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "/lib" in line}
    except OSError:
        return None
    runtimes = sorted(p for p in paths if os.path.basename(p).startswith(("libgomp", "libiomp5")))
    torch_dir = os.path.dirname(torch.__file__)
    own = [p for p in runtimes if p.startswith(torch_dir)]
    if own or len(runtimes) == 1:
        return (own or runtimes)[0]
    return None


TEAM_ENVIRONMENT: Final = _load()
"""None where torch's threads cannot be given the caller's environment (see the module)."""


_steps: Final = threading.local()
"""Per calling thread: ``shared``, True while its team has the step's environment."""


def follow_step(device: Any, threads: int) -> bool:
    """Give this thread's torch team (of ``threads``, more than one) the step's
    environment for the rest of the step, where ``device`` flushes subnormals; False where
    that cannot be done (the caller then runs torch on one thread)."""
    if getattr(_steps, "shared", False):
        return True
    at_step_end = getattr(device, "at_step_end", None)
    team = TEAM_ENVIRONMENT
    if team is None or at_step_end is None:
        return False
    env = team.share(threads)
    _steps.shared = True

    def release() -> None:
        _steps.shared = False
        team.release(env, max(threads, torch.get_num_threads()))

    at_step_end(release)
    return True
