"""Convolution, pooling and batch-norm kernels on the CPU: ResNet-50's convolution layers,
MobileNet-like depthwise layers, pools, Conv2DBackpropInput and FusedBatchNormV3.

Three columns, measured in the same run, float32 NHWC:

- ``numpy``: our default CPU kernel with only the numpy plugin installed (the reference
  kernels: im2col + one matmul, einsum, per-tap pooling);
- ``torch kernel``: our CPU kernel labelled ``torch`` (torch on zero-copy views of the numpy
  buffers, through ``OpKernelContext`` as the executor runs it);
- ``torch direct``: torch's own function called directly on a channels_last tensor, the
  weights already in torch's layout (what a torch user would run).

Command: ``.venv/bin/python benchmarks/bench_conv.py [--quick] [--batch 1 8] [--threads 1]``.
Each kernel is built once; the three columns are run in turn (interleaved), and each cell
is the best of ``--repeats`` rounds after one warm-up. Times are the process's CPU time of
single-threaded runs by default (numpy's BLAS and torch both at ``--threads``): the
development machine is shared (2 cores, load average far above 2), where wall-clock times
of one run swing by 10x; with one thread, CPU time is what the wall clock would read on
an idle core. ``--wall`` times the wall clock instead. The numpy and torch kernels' outputs
are checked against each other before timing.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import kernloom.plugin as klp
from kernloom.framework.node_def import NodeDef

if __name__ == "__main__":  # BLAS reads its thread count when numpy is imported
    _threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _threads
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import kernloom as kl
from kernloom.framework.kernel_registry import run_compute
from kernloom_cpu_numpy import plugin as cpu_plugin
from kernloom_gpu_torch import plugin as torch_plugin


def _registry(*plugins: Any) -> klp.Registry:
    registry = klp.Registry()
    for name, module in plugins:
        registry.register_plugin(module, name=name)
    return registry


NUMPY_ONLY = _registry(("cpu_numpy", cpu_plugin))
WITH_TORCH = _registry(("cpu_numpy", cpu_plugin), ("gpu_torch", torch_plugin))
CPU = NUMPY_ONLY.create_devices().lookup("CPU:0")
CPU_T = WITH_TORCH.create_devices().lookup("CPU:0")


@dataclass(frozen=True)
class Layer:
    name: str
    op: str
    hw: int
    c_in: int
    k: int = 1
    c_out: int = 0
    stride: int = 1
    padding: str = "SAME"
    extra: tuple[tuple[str, Any], ...] = ()


# ResNet-50 (v1.5: the stride on the 3x3) at 224x224: every distinct convolution shape.
RESNET = [
    Layer("stem 7x7/2 3->64 @224", "Conv2D", 224, 3, 7, 64, 2),
    Layer("c2 1x1 64->64 @56", "Conv2D", 56, 64, 1, 64),
    Layer("c2 3x3 64->64 @56", "Conv2D", 56, 64, 3, 64),
    Layer("c2 1x1 64->256 @56", "Conv2D", 56, 64, 1, 256),
    Layer("c2 1x1 256->64 @56", "Conv2D", 56, 256, 1, 64),
    Layer("c3 1x1 256->128 @56", "Conv2D", 56, 256, 1, 128),
    Layer("c3 3x3/2 128->128 @56", "Conv2D", 56, 128, 3, 128, 2),
    Layer("c3 1x1/2 256->512 @56 (proj)", "Conv2D", 56, 256, 1, 512, 2),
    Layer("c3 1x1 128->512 @28", "Conv2D", 28, 128, 1, 512),
    Layer("c3 1x1 512->128 @28", "Conv2D", 28, 512, 1, 128),
    Layer("c3 3x3 128->128 @28", "Conv2D", 28, 128, 3, 128),
    Layer("c4 1x1 512->256 @28", "Conv2D", 28, 512, 1, 256),
    Layer("c4 3x3/2 256->256 @28", "Conv2D", 28, 256, 3, 256, 2),
    Layer("c4 1x1/2 512->1024 @28 (proj)", "Conv2D", 28, 512, 1, 1024, 2),
    Layer("c4 1x1 256->1024 @14", "Conv2D", 14, 256, 1, 1024),
    Layer("c4 1x1 1024->256 @14", "Conv2D", 14, 1024, 1, 256),
    Layer("c4 3x3 256->256 @14", "Conv2D", 14, 256, 3, 256),
    Layer("c5 1x1 1024->512 @14", "Conv2D", 14, 1024, 1, 512),
    Layer("c5 3x3/2 512->512 @14", "Conv2D", 14, 512, 3, 512, 2),
    Layer("c5 1x1/2 1024->2048 @14 (proj)", "Conv2D", 14, 1024, 1, 2048, 2),
    Layer("c5 1x1 512->2048 @7", "Conv2D", 7, 512, 1, 2048),
    Layer("c5 1x1 2048->512 @7", "Conv2D", 7, 2048, 1, 512),
    Layer("c5 3x3 512->512 @7", "Conv2D", 7, 512, 3, 512),
]
OTHERS = [
    Layer("dw 3x3 32 @112", "DepthwiseConv2dNative", 112, 32, 3, 1),
    Layer("dw 3x3/2 64 @112", "DepthwiseConv2dNative", 112, 64, 3, 1, 2),
    Layer("dw 3x3 256 @28", "DepthwiseConv2dNative", 28, 256, 3, 1),
    Layer("dw 3x3 512 @14", "DepthwiseConv2dNative", 14, 512, 3, 1),
    Layer("maxpool 3x3/2 64 @112", "MaxPool", 112, 64, 3, 0, 2),
    Layer("avgpool 3x3/1 SAME 256 @28", "AvgPool", 28, 256, 3, 0, 1),
    Layer("avgpool 7x7 global 2048 @7", "AvgPool", 7, 2048, 7, 0, 1, "VALID"),
    Layer("dx 3x3 64->64 @56", "Conv2DBackpropInput", 56, 64, 3, 64),
    Layer("dx 3x3/2 128->128 @56", "Conv2DBackpropInput", 56, 128, 3, 128, 2),
    Layer("bn infer 256 @56", "FusedBatchNormV3", 56, 256, extra=(("is_training", False),)),
    Layer("bn train 256 @56", "FusedBatchNormV3", 56, 256, extra=(("is_training", True),)),
]


def _pads(size: int, k: int, stride: int, padding: str) -> tuple[int, int]:
    if padding == "VALID":
        return 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return total // 2, total - total // 2


def _setup(
    layer: Layer, batch: int, rng: np.random.Generator
) -> tuple[list[Any], dict[str, Any], Callable[[], Any]]:
    """Inputs and attrs of our op, and the direct torch call."""
    n, hw, c, k, s = batch, layer.hw, layer.c_in, layer.k, layer.stride
    x = rng.standard_normal((n, hw, hw, c)).astype(np.float32)
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)  # channels_last NCHW view
    strides = [1, s, s, 1]
    pad = _pads(hw, k, s, layer.padding)[1]  # torch pads symmetrically (torchvision's choice)
    if layer.op == "Conv2D":
        w = rng.standard_normal((k, k, c, layer.c_out)).astype(np.float32) * 0.1
        wt = torch.from_numpy(w).permute(3, 2, 0, 1).contiguous()
        attrs: dict[str, Any] = {"strides": strides, "padding": layer.padding}
        return [x, w], attrs, lambda: F.conv2d(xt, wt, stride=s, padding=pad)
    if layer.op == "DepthwiseConv2dNative":
        w = rng.standard_normal((k, k, c, 1)).astype(np.float32)
        wt = torch.from_numpy(w).permute(2, 3, 0, 1).reshape(c, 1, k, k).contiguous()
        attrs = {"strides": strides, "padding": layer.padding}
        return [x, w], attrs, lambda: F.conv2d(xt, wt, stride=s, padding=pad, groups=c)
    if layer.op in ("MaxPool", "AvgPool"):
        attrs = {"ksize": [1, k, k, 1], "strides": strides, "padding": layer.padding}
        if layer.op == "MaxPool":
            return [x], attrs, lambda: F.max_pool2d(xt, k, s, padding=pad)
        return [x], attrs, lambda: F.avg_pool2d(xt, k, s, padding=pad, count_include_pad=False)
    if layer.op == "Conv2DBackpropInput":
        w = rng.standard_normal((k, k, c, layer.c_out)).astype(np.float32) * 0.1
        out = -(-hw // s)
        dy = rng.standard_normal((n, out, out, layer.c_out)).astype(np.float32)
        dyt = torch.from_numpy(dy).permute(0, 3, 1, 2)
        wt = torch.from_numpy(w).permute(3, 2, 0, 1).contiguous()
        attrs = {"strides": strides, "padding": layer.padding}
        sizes = np.array([n, hw, hw, c], np.int32)
        extra = hw - ((out - 1) * s - 2 * pad + k)
        return (
            [sizes, w, dy],
            attrs,
            lambda: F.conv_transpose2d(dyt, wt, stride=s, padding=pad, output_padding=extra),
        )
    stats = [rng.standard_normal(c).astype(np.float32) for _ in range(3)]
    stats.append(rng.random(c).astype(np.float32) + 0.5)
    training = dict(layer.extra)["is_training"]
    st = [torch.from_numpy(v) for v in stats]
    attrs = {"is_training": training, "epsilon": 0.001}
    if training:
        return (
            [x, *stats],
            attrs,
            lambda: F.batch_norm(xt, None, None, st[0], st[1], True, 0.0, 1e-3),
        )
    return (
        [x, *stats],
        attrs,
        lambda: F.batch_norm(xt, st[2], st[3], st[0], st[1], False, 0.0, 1e-3),
    )


def _kernel(
    registry: klp.Registry,
    device: Any,
    op: str,
    inputs: list[Any],
    attrs: dict[str, Any],
    label: str,
) -> Callable[[], list[Any]]:
    op_def = registry.op_def(op)
    full = op_def.infer_attrs([kl.as_dtype(x.dtype) for x in inputs], dict(attrs), op.lower())
    if label:
        full["_kernel"] = label
    kernel = registry.create_kernel(NodeDef(name=op.lower(), op=op, attrs=full), device)

    def run() -> list[Any]:
        ctx = klp.OpKernelContext(kernel, inputs, device)
        run_compute(kernel, ctx)
        return ctx.outputs()

    return run


CLOCK: list[Callable[[], float]] = [time.process_time]


def _best(fns: list[Callable[[], Any]], repeats: int) -> list[float]:
    """Best time of each function in ms, over ``repeats`` interleaved rounds."""
    clock = CLOCK[0]
    best = [float("inf")] * len(fns)
    for fn in fns:
        fn()  # warm-up
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = clock()
            fn()
            best[i] = min(best[i], clock() - start)
    return [b * 1e3 for b in best]


def bench(batch: int, layers: list[Layer], repeats: int) -> list[tuple[str, float, float, float]]:
    rng = np.random.default_rng(0)
    rows = []
    for layer in layers:
        inputs, attrs, direct = _setup(layer, batch, rng)
        ours = _kernel(NUMPY_ONLY, CPU, layer.op, inputs, attrs, "")
        theirs = _kernel(WITH_TORCH, CPU_T, layer.op, inputs, attrs, "torch")
        a, b = np.asarray(ours()[0]), np.asarray(theirs()[0])
        scale = max(float(np.abs(a).max()), 1.0)
        assert np.allclose(a, b, rtol=1e-3, atol=1e-3 * scale), layer.name
        t_ours, t_theirs, t_direct = _best([ours, theirs, direct], repeats)
        rows.append((layer.name, t_ours, t_theirs, t_direct))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, only batch 1 and 8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads")
    parser.add_argument("--wall", action="store_true", help="wall-clock instead of CPU time")
    parser.add_argument("--only", default="", help="only the layers whose name contains this")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    torch.set_num_threads(args.threads)
    if args.wall:
        CLOCK[0] = time.perf_counter
    print(
        f"# Python {platform.python_version()}, numpy {np.__version__}, torch "
        f"{torch.__version__}, {args.threads} thread(s), "
        f"{'wall clock' if args.wall else 'CPU time'}, best of {repeats} interleaved "
        f"round(s) after a warm-up, float32 NHWC"
    )
    for batch in args.batch:
        print(f"\n## batch {batch}\n")
        print(
            "| layer | numpy ms | torch kernel ms | torch direct ms "
            "| numpy / torch kernel | torch kernel / direct |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        totals = [0.0, 0.0, 0.0]
        for group, every in (("ResNet-50 convolutions", RESNET), (None, OTHERS)):
            layers = [layer for layer in every if args.only in layer.name]
            for name, ours, theirs, direct in bench(batch, layers, repeats):
                print(
                    f"| {name} | {ours:.2f} | {theirs:.2f} | {direct:.2f} "
                    f"| {ours / theirs:.2f}x | {theirs / direct:.2f}x |"
                )
                if group:
                    totals = [totals[0] + ours, totals[1] + theirs, totals[2] + direct]
            if group:
                n, t, d = totals
                print(
                    f"| **{group}, total** | **{n:.1f}** | **{t:.1f}** | **{d:.1f}** "
                    f"| **{n / t:.2f}x** | **{t / d:.2f}x** |"
                )


if __name__ == "__main__":
    main()
