"""Kernel-level costs: labelled kernels against the default, buffer forwarding, dispatch.

Run with ``make bench`` (or ``.venv/bin/python benchmarks/bench_kernels.py``). Each kernel
is built once and then run through ``OpKernelContext`` + ``Device.compute``, as the
executor will run it; every comparison is a ratio from one run, best of 5 repeats.
"""

from __future__ import annotations

import gc
import platform
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np

import kernloom as kl
import kernloom.plugin as klp
from kernloom.framework.kernel_registry import run_compute
from kernloom.framework.node_def import NodeDef
from kernloom_cpu_numpy import NumpyCPUDevice

REGISTRY = klp.default_registry()
CPU = REGISTRY.create_devices().lookup("CPU:0")


def kernel_for(
    op: str,
    inputs: list[np.ndarray[Any, Any]],
    attrs: dict[str, Any] | None = None,
    label: str = "",
) -> klp.OpKernel:
    op_def = REGISTRY.op_def(op)
    full = op_def.infer_attrs([kl.as_dtype(x.dtype) for x in inputs], attrs or {}, op.lower())
    if label:
        full["_kernel"] = label
    return REGISTRY.create_kernel(NodeDef(name=op.lower(), op=op, attrs=full), CPU)


def run_once(
    kernel: klp.OpKernel, inputs: list[Any], forwardable: tuple[int, ...] = ()
) -> list[Any]:
    ctx = klp.OpKernelContext(kernel, inputs, CPU, forwardable=forwardable)
    run_compute(kernel, ctx)
    return ctx.outputs()


def best(fn: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def bench_labels() -> dict[str, float]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    out: dict[str, float] = {}
    default = kernel_for("MatMul", [a, b])
    base = best(lambda: run_once(default, [a, b]), 20)
    out["matmul_512_f32_default_ms"] = base * 1e3
    for label in ("einsum", "blocked"):
        k = kernel_for("MatMul", [a, b], label=label)

        def call(k: klp.OpKernel = k) -> list[Any]:
            return run_once(k, [a, b])

        t = best(call, 20)
        out[f"matmul_512_f32_{label}_ms"] = t * 1e3
        out[f"matmul_512_f32_{label}_over_default"] = t / base
    logits = rng.standard_normal((4096, 1000)).astype(np.float32)
    soft = kernel_for("Softmax", [logits])
    lse = kernel_for("Softmax", [logits], label="logsumexp")
    t_soft = best(lambda: run_once(soft, [logits]), 10)
    t_lse = best(lambda: run_once(lse, [logits]), 10)
    out["softmax_4096x1000_default_ms"] = t_soft * 1e3
    out["softmax_4096x1000_logsumexp_ms"] = t_lse * 1e3
    out["softmax_logsumexp_over_default"] = t_lse / t_soft
    return out


def bench_forwarding() -> dict[str, float]:
    """A chain of 8 elementwise kernels over 4M float32 (16 MiB), each input handed over."""
    x = np.random.default_rng(1).standard_normal(1 << 22).astype(np.float32)
    kernels = [kernel_for(op, [x]) for op in ("Neg", "Square", "Tanh", "Relu") * 2]

    def chain(forward: bool) -> None:
        value = CPU.allocate(x.shape, kl.float32)
        value[...] = x
        for kernel in kernels:
            inputs = [value]
            del value
            (value,) = run_once(kernel, inputs, (0,) if forward else ())
            del inputs
        del value  # the chain's result is dropped, as a fetched value would be copied out

    out: dict[str, float] = {}
    for forward in (False, True):
        gc.collect()
        CPU.reset_peak_memory()
        before = CPU.memory_stats().bytes_in_use

        def call(f: bool = forward) -> None:
            chain(f)

        t = best(call, 5)
        key = "forwarded" if forward else "allocated"
        out[f"chain8_16MiB_{key}_ms"] = t * 1e3
        out[f"chain8_16MiB_{key}_peak_MiB"] = (
            CPU.memory_stats().peak_bytes_in_use - before
        ) / 2**20
    out["chain8_forwarded_over_allocated_time"] = (
        out["chain8_16MiB_forwarded_ms"] / out["chain8_16MiB_allocated_ms"]
    )
    return out


def bench_dispatch() -> dict[str, float]:
    x = np.ones(16, np.float32)
    relu = kernel_for("Relu", [x])
    through_kernel = best(lambda: run_once(relu, [x]), 5000)
    raw = best(lambda: np.maximum(x, 0), 5000)
    return {
        "relu_16_kernel_us": through_kernel * 1e6,
        "relu_16_numpy_us": raw * 1e6,
        "dispatch_overhead_us": (through_kernel - raw) * 1e6,
    }


def main() -> None:
    results = {**bench_labels(), **bench_forwarding(), **bench_dispatch()}
    assert isinstance(CPU, NumpyCPUDevice)  # the numpy plugin's CPU device
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, "
        f"{CPU.intra_op_pool.num_threads} intra-op threads"
    )
    for key, value in results.items():
        print(f"  {key:45s} {value:10.3f}")


if __name__ == "__main__":
    main()
