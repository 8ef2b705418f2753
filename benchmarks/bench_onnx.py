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
[--batch 1 8] [--threads 1 2] [--repeats 5]``; results in ``benchmarks/ONNX.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50"])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(
        f"python {platform.python_version()}, onnxruntime {onnxruntime.__version__}, "
        f"onnx {onnx.__version__}, {os.cpu_count()} cores"
    )
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
                    wall, cpu = timed(lambda s=ours, f=feed: s.run(None, f))
                    ours_s, ours_cpu = min(ours_s, wall), min(ours_cpu, cpu)
                    wall, cpu = timed(lambda s=ort, f=feed: s.run(None, f))
                    ort_s, ort_cpu = min(ort_s, wall), min(ort_cpu, cpu)
                print(
                    f"| {name} | {batch} | {threads} | {ours_s * 1e3:.1f} | "
                    f"{ort_s * 1e3:.1f} | {ours_s / ort_s:.2f}x | {ours_cpu * 1e3:.1f} | "
                    f"{ort_cpu * 1e3:.1f} | {ours_cpu / ort_cpu:.2f}x |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
