"""The cyclic garbage collector held off while a graph is built or compiled.

Building and rewriting a graph makes tens of thousands of objects that live on (nodes,
tensors, attr dicts) and few that die, so each generational collection the allocations
trigger walks a heap that only grows, to find little: on onnx's light DenseNet-121 the
collector took a third of the session's first run -- 0.96 s with it, 0.60 s without
(``benchmarks/OPTIMIZER.md``, "The collector"). Reference counting still frees everything
acyclic at once; cycles made meanwhile wait for the next collection after the block.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic cyclic collection inside the block; the collector is left as it was
    found afterwards (a caller that had disabled it keeps it disabled). Two threads in
    such blocks at once at worst re-enable it early."""
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
