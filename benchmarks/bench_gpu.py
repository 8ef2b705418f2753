"""GPU MLP inference: kernloom on each installed GPU backend against CuPy and torch called
directly, on the same computation (batch 4,096, 784-1024-1024-10, relu, softmax).

Every timing includes what a kernloom run includes: the batch copied to the GPU and the
probabilities copied back. The run's metadata is checked for host round trips inside the
GPU partition (there must be none: only the feed and the fetch cross).

    python benchmarks/bench_gpu.py            # every GPU backend that finds a device
Without a GPU it prints each factory's reason and exits 0.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kernloom as kl
import kernloom.plugin as klp
from kernloom.demo import build_mlp, numpy_mlp

SIZES = (784, 1024, 1024, 10)
BATCH = 4096
RUNS = 30


def median_s(fn: Callable[[], Any], runs: int = RUNS, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def cupy_direct(weights: list[Any], x: np.ndarray[Any, Any]) -> Callable[[], Any]:
    import cupy as cp  # type: ignore[import-not-found,import-untyped,unused-ignore]

    ws = [cp.asarray(w) for w in weights]

    def run() -> Any:
        h = cp.asarray(x)
        for i, w in enumerate(ws):
            h = h @ w
            if i < len(ws) - 1:
                h = cp.maximum(h, 0)
        e = cp.exp(h - h.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).get()

    return run


def torch_direct(weights: list[Any], x: np.ndarray[Any, Any]) -> Callable[[], Any]:
    import torch

    ws = [torch.from_numpy(w).cuda() for w in weights]

    def run() -> Any:
        with torch.inference_mode():
            h = torch.from_numpy(x).cuda()
            for i, w in enumerate(ws):
                h = h @ w
                if i < len(ws) - 1:
                    h = torch.relu(h)
            return torch.softmax(h, dim=1).cpu().numpy()

    return run


def kernloom_run(backend_plugin: str, x: np.ndarray[Any, Any]) -> tuple[Callable[[], Any], Any]:
    registry = klp.default_registry()
    graph, tensors, weights = build_mlp(registry, SIZES)
    config = kl.SessionConfig(factory_overrides={"GPU": backend_plugin})
    session = kl.Session(graph, config)
    metadata = kl.RunMetadata()
    session.run(tensors["probs"], {tensors["images"]: x}, run_metadata=metadata)
    return (lambda: session.run(tensors["probs"], {tensors["images"]: x})), (
        session,
        metadata,
        weights,
    )


def main() -> int:
    registry = klp.default_registry()
    usable = {
        r.registration.origin.plugin: r.registration
        for r in registry.resolve_factories()
        if r.registration.device_type == "GPU"
    }
    if not usable:
        print("no GPU plugin is installed: pip install kernloom-gpu-cupy or kernloom-gpu-torch")
        return 0
    found = {name: reg for name, reg in usable.items() if reg.factory.unavailable_reason() is None}
    for name, reg in usable.items():
        if name not in found:
            print(f"{name}: no GPU ({reg.factory.unavailable_reason()})")
    if not found:
        return 0
    x = np.random.default_rng(1).standard_normal((BATCH, SIZES[0])).astype(np.float32)
    print(f"GPU MLP, batch {BATCH}, {'-'.join(map(str, SIZES))}, median of {RUNS} runs")
    for plugin, direct in (("gpu_cupy", cupy_direct), ("gpu_torch", torch_direct)):
        if plugin not in found:
            continue
        ours, (session, metadata, weights) = kernloom_run(plugin, x)
        reference = direct(weights, x)
        expected = numpy_mlp(x, weights)
        np.testing.assert_allclose(ours(), expected, rtol=2e-3, atol=1e-5)
        np.testing.assert_allclose(reference(), expected, rtol=2e-3, atol=1e-5)
        crossings = sorted(metadata.bytes_copied)
        # Alternate the two, so that drift on the machine hits both alike.
        t_direct = median_s(reference)
        t_ours = median_s(ours)
        t_direct = min(t_direct, median_s(reference))
        device = session.devices.lookup("GPU:0").attributes.physical_device_desc
        print(f"  {plugin} on {device}")
        print(
            f"    kernloom {t_ours * 1e3:.3f} ms, {plugin.removeprefix('gpu_')} directly "
            f"{t_direct * 1e3:.3f} ms -> ratio {t_ours / t_direct:.3f}"
        )
        print(f"    copies in a run: {crossings} (only client<->GPU means no host round trip)")
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
