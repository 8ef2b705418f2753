"""The real CNNs in the onnx wheel on kernloom and on ONNX Runtime, in the same run.

For each model (``--models``, default ResNet-50), batch size (1 and 8) and thread count
(1 and 2), both runtimes run the same ONNX bytes on the CPU: kernloom through
``kernloom.onnx.InferenceSession`` (``SessionConfig(inter_op_threads=T,
intra_op_threads=T)``), ONNX Runtime through its own session (``intra_op_num_threads=T``,
``inter_op_num_threads=1``, all graph optimizations on). The two are timed interleaved,
one warm-up run each, and each cell is the best wall-clock time of ``--repeats`` runs (the
development machine is shared: the best run is the one least disturbed), and beside it the
best process CPU time (steadier under load for one thread). Outputs are
checked against each other before timing.

For batch 8 the input's batch dimension is set to 8 and a Reshape whose shape initializer
starts with a literal 1 (the batch, in the light models' classifier heads) gets -1 there:
the same edit for both runtimes.

Command: ``.venv/bin/python benchmarks/bench_onnx.py [--models resnet50 squeezenet ...]
[--batch 1 8] [--threads 1 2] [--repeats 5] [--isolated [--inter-op-threads N]]``; results in
``benchmarks/ONNX.md``. ``--isolated`` times each runtime alone in a child process (their
threads disturb each other in one process).
``--conv-layers`` times ResNet-50's convolutions in torch alone, by formulation (how the
torch plugin's CPU convolution was chosen).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime  # type: ignore[import-untyped]
from onnx import numpy_helper

import kernloom as kl
import kernloom.onnx as klonnx

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def batched(proto: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A copy of ``proto`` whose input and batch-1 Reshapes take ``batch`` images."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    if batch == 1:
        return model
    initializers = {i.name: i for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name not in initializers:
            value.type.tensor_type.shape.dim[0].dim_value = batch
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.input[1] in initializers:
            init = initializers[node.input[1]]
            shape = numpy_helper.to_array(init).copy()
            if shape.size and shape[0] == 1:
                shape[0] = -1
                init.CopyFrom(numpy_helper.from_array(shape, init.name))
    del model.graph.output[0].type.tensor_type.shape.dim[:]
    return model


def best_of(run: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def timed(run: Callable[[], Any]) -> tuple[float, float]:
    """(wall-clock, process CPU) seconds of one run. On a shared machine the CPU time is
    the steadier number for one thread: time lost to other processes is not counted (with
    more threads it also counts threads that spin waiting for work)."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


# ResNet-50's convolutions: (C_in, C_out, kernel, stride, input H=W, how many in the model)
RESNET50_CONVS = (
    (3, 64, 7, 2, 224, 1),
    (64, 64, 1, 1, 56, 1),
    (64, 64, 3, 1, 56, 3),
    (64, 256, 1, 1, 56, 4),
    (256, 64, 1, 1, 56, 2),
    (256, 128, 1, 1, 56, 1),
    (128, 128, 3, 2, 56, 1),
    (128, 512, 1, 1, 28, 4),
    (256, 512, 1, 2, 56, 1),
    (512, 128, 1, 1, 28, 3),
    (128, 128, 3, 1, 28, 3),
    (512, 256, 1, 1, 28, 1),
    (256, 256, 3, 2, 28, 1),
    (256, 1024, 1, 1, 14, 6),
    (512, 1024, 1, 2, 28, 1),
    (1024, 256, 1, 1, 14, 5),
    (256, 256, 3, 1, 14, 5),
    (1024, 512, 1, 1, 14, 1),
    (512, 512, 3, 2, 14, 1),
    (512, 2048, 1, 1, 7, 3),
    (1024, 2048, 1, 2, 14, 1),
    (2048, 512, 1, 1, 7, 2),
    (512, 512, 3, 1, 7, 2),
)


def _layer_cases(
    batch: int, c_in: int, c_out: int, k: int, stride: int, size: int
) -> dict[str, Callable[[], Any]]:
    """One convolution (+ bias + ReLU, NCHW in and out), by formulation."""
    import torch
    import torch.nn.functional as F

    reorder: Any = torch._C._nn.mkldnn_reorder_conv2d_weight
    pointwise: Any = torch.ops.mkldnn._convolution_pointwise
    x = torch.randn(batch, c_in, size, size)
    hwio = torch.randn(k, k, c_in, c_out)
    bias = torch.randn(c_out)
    pad, strides = (k - 1) // 2, [stride, stride]
    oihw = hwio.permute(3, 2, 0, 1).contiguous()
    out = torch.empty(F.conv2d(x, oihw, stride=stride, padding=pad).shape)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w_cl = oihw.contiguous(memory_format=torch.channels_last)
    packed = reorder(oihw.to_mkldnn(), [pad, pad], strides, [1, 1], 1, list(x.shape))
    packed_cl = reorder(w_cl.to_mkldnn(), [pad, pad], strides, [1, 1], 1, list(x.shape))

    def onednn(inp: Any, weights: Any) -> Any:
        y = pointwise(inp, weights, bias, [pad, pad], strides, [1, 1], 1, "none", [], "")
        return y.clamp_(min=0)

    def per_call_filter() -> None:
        w = hwio.reshape(-1, c_out).t().contiguous().reshape(c_out, k, k, c_in)
        y = F.conv2d(x, w.permute(0, 3, 1, 2), stride=stride, padding=pad)
        out.copy_(y).add_(bias.reshape(-1, 1, 1)).clamp_(min=0)

    return {
        "filter copied per call (before)": per_call_filter,
        "F.conv2d, OIHW filter made once": lambda: F.conv2d(
            x, oihw, bias, stride=stride, padding=pad
        ).clamp_(min=0),
        "oneDNN, reordered filter, NCHW memory": lambda: onednn(x, packed),
        "oneDNN, reordered filter, channels_last": lambda: onednn(x_cl, packed_cl),
        "same, NCHW in and out (2 transposes)": lambda: out.copy_(
            onednn(x.contiguous(memory_format=torch.channels_last), packed_cl)
        ),
    }


def conv_layers(batch: int, threads: int, repeats: int) -> None:
    """ResNet-50's convolutions (+ bias + ReLU, NCHW in and out) in torch, summed over the
    model, by formulation: what the torch CPU kernel did before ``kernels/onednn.py``
    (a filter copy per call, F.conv2d on NCHW, a copy into the output), F.conv2d with
    the OIHW filter made once, oneDNN with a filter reordered once on NCHW memory, on
    channels_last memory, and on channels_last with NCHW-contiguous input and output
    (a transpose on each side)."""
    import torch

    torch.set_num_threads(threads)
    totals: dict[str, float] = {}
    for c_in, c_out, k, stride, size, count in RESNET50_CONVS:
        for name, case in _layer_cases(batch, c_in, c_out, k, stride, size).items():
            case()
            totals[name] = totals.get(name, 0.0) + best_of(case, repeats) * count
    print(f"ResNet-50's 53 convolutions, batch {batch}, {threads} thread(s), best of {repeats}:")
    for name, seconds in totals.items():
        print(f"| {name} | {seconds * 1e3:.1f} ms |")


def _load(name: str, batch: int) -> tuple[bytes, str, np.ndarray[Any, Any]]:
    """The model's bytes at ``batch``, its image input's name and a fixed random image."""
    proto = onnx.load(str(LIGHT / f"light_{name}.onnx"))
    initializers = {i.name for i in proto.graph.initializer}
    model = batched(proto, batch)
    (value,) = [v for v in model.graph.input if v.name not in initializers]
    shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    return model.SerializeToString(), value.name, x


def child(runtime: str, name: str, batch: int, threads: int, inter: int, repeats: int) -> None:
    """One runtime alone in this process (``--isolated``): one warm-up, then the best
    wall-clock and CPU time of ``repeats`` runs as JSON, the output saved for the check."""
    data, input_name, x = _load(name, batch)
    if runtime == "kernloom":
        config = kl.SessionConfig(inter_op_threads=inter, intra_op_threads=threads)
        session: Any = klonnx.InferenceSession(data, config=config)
    else:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    feed = {input_name: x}
    (out,) = session.run(None, feed)
    wall = cpu = float("inf")
    for _ in range(repeats):
        w, c = timed(lambda: session.run(None, feed))
        wall, cpu = min(wall, w), min(cpu, c)
    np.save(os.environ["KERNLOOM_BENCH_OUT"], out)
    print(json.dumps({"wall": wall, "cpu": cpu}))


def isolated(args: argparse.Namespace) -> None:
    """Each runtime in a process of its own: no runtime's spinning threads take the cores
    the other one needs (ONNX Runtime's two-thread ResNet-50 read 53.7 ms right after
    kernloom's runs in one process, 24.9 ms alone)."""
    for name in args.models:
        for batch in args.batch:
            for threads in args.threads:
                inter = args.inter_op_threads or threads
                results: dict[str, dict[str, float]] = {}
                outputs: dict[str, np.ndarray[Any, Any]] = {}
                with tempfile.TemporaryDirectory() as folder:
                    for runtime in ("kernloom", "ort"):
                        path = os.path.join(folder, f"{runtime}.npy")
                        argv = [runtime, name, batch, threads, inter, args.repeats]
                        done = subprocess.run(
                            [sys.executable, __file__, "--child", *map(str, argv)],
                            capture_output=True,
                            text=True,
                            env={**os.environ, "KERNLOOM_BENCH_OUT": path},
                            check=False,
                        )
                        if done.returncode != 0:
                            raise SystemExit(f"{runtime} failed:\n{done.stderr}")
                        results[runtime] = json.loads(done.stdout.strip().splitlines()[-1])
                        outputs[runtime] = np.load(path)
                np.testing.assert_allclose(
                    outputs["kernloom"], outputs["ort"], rtol=1e-3, atol=1e-5
                )
                ours, ort = results["kernloom"], results["ort"]
                print(
                    f"| {name} | {batch} | {threads} (inter-op {inter}) | "
                    f"{ours['wall'] * 1e3:.1f} | {ort['wall'] * 1e3:.1f} | "
                    f"{ours['wall'] / ort['wall']:.2f}x | "
                    f"{ours['cpu'] * 1e3:.1f} | {ort['cpu'] * 1e3:.1f} | "
                    f"{ours['cpu'] / ort['cpu']:.2f}x |",
                    flush=True,
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50"])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--isolated",
        action="store_true",
        help="time each runtime alone in a process of its own (the fair comparison)",
    )
    parser.add_argument(
        "--inter-op-threads",
        type=int,
        default=0,
        help="kernloom's inter_op_threads with --isolated (default: the thread count)",
    )
    parser.add_argument(
        "--conv-layers",
        action="store_true",
        help="time ResNet-50's convolutions in torch by formulation, instead of the models",
    )
    args = parser.parse_args(argv)
    if args.conv_layers:
        for batch in args.batch:
            for threads in args.threads:
                conv_layers(batch, threads, args.repeats)
        return 0
    print(
        f"python {platform.python_version()}, onnxruntime {onnxruntime.__version__}, "
        f"onnx {onnx.__version__}, {os.cpu_count()} cores"
    )
    if args.isolated:
        print(
            "| model | batch | threads | kernloom ms | ONNX Runtime ms | kernloom / ORT "
            "| kernloom CPU ms | ORT CPU ms | CPU ratio |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        isolated(args)
        return 0
    print(
        "| model | batch | threads | kernloom ms | ONNX Runtime ms | kernloom / ORT "
        "| kernloom CPU ms | ORT CPU ms | CPU ratio |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.models:
        proto = onnx.load(str(LIGHT / f"light_{name}.onnx"))
        initializers = {i.name for i in proto.graph.initializer}
        for batch in args.batch:
            model = batched(proto, batch)
            data = model.SerializeToString()
            (value,) = [v for v in model.graph.input if v.name not in initializers]
            shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
            x = np.random.default_rng(0).random(shape, dtype=np.float32)
            for threads in args.threads:
                config = kl.SessionConfig(inter_op_threads=threads, intra_op_threads=threads)
                ours = klonnx.InferenceSession(data, config=config)
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                ort = onnxruntime.InferenceSession(
                    data, options, providers=["CPUExecutionProvider"]
                )
                feed = {value.name: x}
                (a,) = ours.run(None, feed)
                (b,) = ort.run(None, feed)
                np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
                ours_s = ort_s = ours_cpu = ort_cpu = float("inf")
                for _ in range(args.repeats):  # interleaved, best of each

                    def run_ours(
                        s: klonnx.InferenceSession = ours, f: dict[str, Any] = feed
                    ) -> list[np.ndarray[Any, Any]]:
                        return s.run(None, f)

                    def run_ort(s: Any = ort, f: dict[str, Any] = feed) -> Any:
                        return s.run(None, f)

                    wall, cpu = timed(run_ours)
                    ours_s, ours_cpu = min(ours_s, wall), min(ours_cpu, cpu)
                    wall, cpu = timed(run_ort)
                    ort_s, ort_cpu = min(ort_s, wall), min(ort_cpu, cpu)
                print(
                    f"| {name} | {batch} | {threads} | {ours_s * 1e3:.1f} | "
                    f"{ort_s * 1e3:.1f} | {ours_s / ort_s:.2f}x | {ours_cpu * 1e3:.1f} | "
                    f"{ort_cpu * 1e3:.1f} | {ours_cpu / ort_cpu:.2f}x |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "--child":
        runtime, model, *numbers = sys.argv[2:]
        batch, threads, inter, repeats = map(int, numbers)
        child(runtime, model, batch, threads, inter, repeats)
    else:
        sys.exit(main())
