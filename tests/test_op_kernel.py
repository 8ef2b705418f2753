"""Kernel contexts, forwarding rules, OpSegment, ResourceMgr and cancellation."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
from kernloom.framework.kernel_registry import run_compute
from kernloom.framework.op_segment import OpSegment
from kernloom.framework.resource_mgr import ResourceMgr
from kernloom.testing import run_kernel


def make_context(
    op: str,
    inputs: list[object],
    attrs: dict[str, object],
    compute: object,
    forwardable: tuple[int, ...] = (),
) -> klp.OpKernelContext:
    registry = klp.default_registry()
    device = registry.create_devices().lookup("CPU:0")
    op_def = registry.op_def(op)
    full = op_def.check_attrs(attrs, "k")
    kernel_def = klp.KernelDefBuilder(op).device("CPU").build()
    signature = klp.KernelSignature.make("k", op_def, full, kernel_def)

    class Kernel(klp.OpKernel):
        def compute(self, ctx: klp.OpKernelContext) -> None:
            compute(ctx)  # type: ignore[operator]

    kernel = Kernel(klp.OpKernelConstruction(signature, device))
    return klp.OpKernelContext(kernel, list(inputs), device, forwardable=forwardable)


def test_inputs_by_index_name_and_list() -> None:
    seen = {}

    def compute(ctx: klp.OpKernelContext) -> None:
        seen["values"] = ctx.input_list("values")
        seen["axis"] = ctx.input("axis")
        seen["dtype"] = ctx.input_dtype(0)
        with pytest.raises(kl.KernelError, match="argument 'values' is a list"):
            ctx.input("values")
        with pytest.raises(
            kl.NotFoundError, match=r"no input or output named 'valeus'.*Did you mean 'values'"
        ):
            ctx.input("valeus")
        ctx.allocate_output("output", (1,))

    a, b, axis = np.zeros(1, np.float32), np.ones(1, np.float32), np.int32(0)
    ctx = make_context("ConcatV2", [a, b, axis], {"T": kl.float32, "N": 2}, compute)
    run_compute(ctx.kernel, ctx)
    assert seen["values"][1] is b and seen["axis"] is axis and seen["dtype"] is kl.float32


CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def test_outputs_must_be_set_once_with_the_declared_dtype() -> None:
    """A kernel that breaks the output contract is at fault, not the caller: a plain
    KernelError (not an InvalidArgumentError) naming the node, op, device and kernel."""
    ctx = make_context("Relu", [np.zeros(2, np.float32)], {"T": kl.float32}, lambda ctx: None)
    run_compute(ctx.kernel, ctx)
    with pytest.raises(
        kl.KernelError,
        match=rf"^node 'k' \(op Relu\) on {CPU0}: kernel .*Kernel did not set output 0 "
        r"\(activations\)$",
    ) as unset:
        ctx.outputs()

    def twice(ctx: klp.OpKernelContext) -> None:
        ctx.set_output(0, ctx.input(0))
        ctx.set_output(0, ctx.input(0))

    ctx = make_context("Relu", [np.zeros(2, np.float32)], {"T": kl.float32}, twice)
    with pytest.raises(
        kl.KernelError,
        match=rf"^node 'k' \(op Relu\) on {CPU0}: kernel .*Kernel set output 0 twice$",
    ) as set_twice:
        run_compute(ctx.kernel, ctx)

    def wrong_dtype(ctx: klp.OpKernelContext) -> None:
        ctx.set_output(0, np.zeros(2, np.float64))

    ctx = make_context("Relu", [np.zeros(2, np.float32)], {"T": kl.float32}, wrong_dtype)
    run_compute(ctx.kernel, ctx)
    with pytest.raises(
        kl.KernelError,
        match=rf"^node 'k' \(op Relu\) on {CPU0}: kernel .*Kernel produced output 0 with dtype "
        r"float64, but the op declares float32$",
    ) as wrong:
        ctx.outputs()
    for caught in (unset, set_twice, wrong):
        assert type(caught.value) is kl.KernelError
        assert not isinstance(caught.value, kl.InvalidArgumentError)


def test_a_kernel_crash_becomes_an_error_naming_the_node() -> None:
    def crash(ctx: klp.OpKernelContext) -> None:
        raise ZeroDivisionError("boom")

    ctx = make_context("Relu", [np.zeros(2, np.float32)], {"T": kl.float32}, crash)
    with pytest.raises(
        kl.KernelError,
        match=r"node 'k' \(op Relu\): kernel .*Kernel failed: ZeroDivisionError: boom",
    ) as info:
        run_compute(ctx.kernel, ctx)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_forwarding_only_what_the_caller_hands_over() -> None:
    x = np.arange(4.0, dtype=np.float32)
    handed = run_kernel("Relu", [x], forwardable=[0])
    assert handed.forwarded == [(0, 0)]
    kept = run_kernel("Relu", [x])
    assert kept.forwarded == []
    np.testing.assert_array_equal(handed.outputs[0], kept.outputs[0])
    np.testing.assert_array_equal(x, np.arange(4.0))  # the caller's array is untouched


def test_forwarding_refuses_views_read_only_and_mismatched_buffers() -> None:
    base = np.arange(6.0)

    def try_forward(ctx: klp.OpKernelContext) -> None:
        out = ctx.forward_input_or_allocate_output([0], 0, ctx.input(0).shape)
        out[...] = 1

    for value, why in (
        (base[::2], "not contiguous / a view"),
        (base.reshape(2, 3), "a view"),
        (np.zeros(3, np.float32), "other dtype"),
    ):
        ctx = make_context("Relu", [value], {"T": kl.float64}, try_forward, forwardable=(0,))
        run_compute(ctx.kernel, ctx)
        assert ctx.forwarded == (), why
    read_only = np.zeros(3)
    read_only.flags.writeable = False
    ctx = make_context("Relu", [read_only], {"T": kl.float64}, try_forward, forwardable=(0,))
    run_compute(ctx.kernel, ctx)
    assert ctx.forwarded == ()
    np.testing.assert_array_equal(base, np.arange(6.0))


def test_cancellation_is_visible_to_kernels() -> None:
    def long_kernel(ctx: klp.OpKernelContext) -> None:
        ctx.check_cancelled()

    ctx = make_context("Relu", [np.zeros(2)], {"T": kl.float64}, long_kernel)
    fired = []
    assert ctx.cancellation.register(lambda: fired.append(1)) is not None
    ctx.cancellation.cancel("deadline exceeded")
    assert fired == [1] and ctx.cancellation.register(lambda: None) is None
    with pytest.raises(
        kl.CancelledError, match=r"node 'k' \(op Relu\) was cancelled: deadline exceeded"
    ):
        run_compute(ctx.kernel, ctx)


def test_op_segment_caches_kernels_per_session_while_held() -> None:
    segment = OpSegment()
    made: list[int] = []

    def create() -> klp.OpKernel:
        made.append(1)
        return object()  # type: ignore[return-value]

    segment.add_hold("s1")
    segment.add_hold("s1")
    first = segment.find_or_create("s1", "node", create)
    assert segment.find_or_create("s1", "node", create) is first and len(made) == 1
    segment.remove_hold("s1")
    assert segment.num_kernels("s1") == 1  # one hold left
    segment.remove_hold("s1")
    assert segment.num_kernels("s1") == 0
    with pytest.raises(KeyError, match="no hold"):
        segment.find_or_create("s1", "node", create)


def test_op_segment_builds_once_under_races() -> None:
    segment = OpSegment()
    segment.add_hold("s")
    results: list[object] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()
        results.append(segment.find_or_create("s", "n", lambda: object()))  # type: ignore[arg-type,return-value]

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(r) for r in results}) == 1


def test_resource_mgr() -> None:
    rm = ResourceMgr()
    rm.create("v", [1, 2])
    assert rm.lookup("v", list) == [1, 2]
    with pytest.raises(kl.AlreadyExistsError, match="localhost/v already exists"):
        rm.create("v", [])
    with pytest.raises(kl.InvalidArgumentError, match="is a list, not a dict"):
        rm.lookup("v", dict)
    assert rm.lookup_or_create("w", dict, dict) == {}
    rm.delete("v")
    with pytest.raises(kl.NotFoundError, match="localhost/v does not exist"):
        rm.lookup("v", list)
    rm.create("x", 1, container="other")
    rm.clear("other")
    assert rm.names("other") == [] and rm.names() == ["w"]
