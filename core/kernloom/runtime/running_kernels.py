"""Which kernels of a step are running right now, found from the threads' stacks.

Only ``Session.close`` asks, and only when a cancelled step has not ended within its
timeout: it then names the node, op and device each stuck kernel belongs to. Looking at
the stacks costs nothing while steps run (no bookkeeping on the executor's hot path);
it is what a debugger does, once, on the error path.

A thread runs a kernel of the step when one of its frames holds an ``OpKernelContext``
of that step (the kernel's ``compute(ctx)``, or the executor frame that called it); the
innermost frame whose ``self`` is an ``OpKernel`` is the kernel itself (a direct entry
of a straight-line step has no context of its own). An asynchronous kernel that never
called back holds no thread, so it cannot be seen this way; the caller says so.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from types import FrameType

from kernloom.framework.op_kernel import OpKernel, OpKernelContext
from kernloom.framework.resource_mgr import ResourceMgr

__all__ = ["RunningKernel", "running_kernels"]


@dataclass(frozen=True, slots=True)
class RunningKernel:
    where: str
    """``node 'n' (op Op)``."""
    device: str
    kernel: str
    """The kernel's class, as in a failed node's error."""
    thread: str

    def describe(self) -> str:
        return f"{self.where} on {self.device} (kernel {self.kernel}, thread {self.thread!r})"


def _kernel_on(
    frame: FrameType | None, step_id: int, resources: ResourceMgr
) -> RunningKernel | None:
    innermost: OpKernel | None = None
    while frame is not None:
        names = frame.f_locals
        owner = names.get("self")
        if innermost is None and isinstance(owner, OpKernel):
            innermost = owner
        ctx = names.get("ctx")
        if (
            isinstance(ctx, OpKernelContext)
            and ctx.step_id == step_id
            and ctx.resource_mgr is resources
        ):
            kernel = innermost if innermost is not None else ctx.kernel
            return RunningKernel(
                kernel.signature.where, ctx.device.name, type(kernel).__qualname__, ""
            )
        frame = frame.f_back
    return None


def running_kernels(step_id: int, resources: ResourceMgr) -> list[RunningKernel]:
    """The kernels of step ``step_id`` (of the session whose resource manager is
    ``resources``: step ids are per session) that some thread is inside now."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    found = []
    for ident, frame in sys._current_frames().items():
        running = _kernel_on(frame, step_id, resources)
        if running is not None:
            thread = names.get(ident, str(ident))
            found.append(RunningKernel(running.where, running.device, running.kernel, thread))
    return sorted(found, key=lambda k: (k.where, k.thread))
