"""Foundation costs: building the registry, tracked allocation, intra-op sharding.

Run with ``make bench`` (or ``.venv/bin/python benchmarks/bench_foundation.py``).
Every comparison is a ratio of two timings taken in the same run, because this machine
is shared and absolute times drift; each timing is the best of several repeats.
"""

from __future__ import annotations

import argparse
import json
import platform
import timeit
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import kernloom as kl
import kernloom.plugin as klp
from kernloom_cpu_numpy import IntraOpPool, NumpyCPUDeviceFactory


def best(fn: Callable[[], object], number: int, repeat: int = 7) -> float:
    """Seconds per call, best of ``repeat`` runs of ``number`` calls."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def bench_registry() -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build = best(lambda: klp.Registry.from_entry_points(environ={}), number=20)
        registry = klp.Registry.from_entry_points(environ={})
    devices = best(lambda: registry.create_devices().close(), number=50)
    return {"registry_build_ms": build * 1e3, "create_devices_ms": devices * 1e3}


def bench_allocation() -> dict[str, float]:
    (device,) = NumpyCPUDeviceFactory().create_devices(klp.DeviceOptions())
    out: dict[str, float] = {}
    for label, shape in (("small_64B", (16,)), ("large_4MiB", (1 << 20,))):

        def empty(s: tuple[int, ...] = shape) -> np.ndarray[Any, np.dtype[np.float32]]:
            return np.empty(s, np.float32)

        def allocate(s: tuple[int, ...] = shape) -> Any:
            return device.allocate(s, kl.float32)

        plain = best(empty, number=2000)
        tracked = best(allocate, number=2000)
        out[f"alloc_{label}_plain_us"] = plain * 1e6
        out[f"alloc_{label}_tracked_us"] = tracked * 1e6
        out[f"alloc_{label}_tracked_over_plain"] = tracked / plain
    return out


def bench_parallel_for(threads: int) -> dict[str, float]:
    pool = IntraOpPool(threads)
    x = np.random.default_rng(0).standard_normal(1 << 23).astype(np.float32)  # 32 MiB
    y = np.empty_like(x)

    def shard(start: int, end: int) -> None:
        np.exp(x[start:end], out=y[start:end])

    serial = best(lambda: np.exp(x, out=y), number=3)
    sharded = best(lambda: pool.parallel_for(x.size, shard, min_shard_size=1 << 16), number=3)
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)
    pool.close()
    return {
        "exp_32MiB_serial_ms": serial * 1e3,
        f"exp_32MiB_parallel_for_{threads}threads_ms": sharded * 1e3,
        "parallel_for_speedup": serial / sharded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--threads", type=int, default=None, help="intra-op threads (default: cores)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    threads = args.threads or IntraOpPool().num_threads
    results = {**bench_registry(), **bench_allocation(), **bench_parallel_for(threads)}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"python {platform.python_version()}, numpy {np.__version__}, {threads} threads")
    for key, value in results.items():
        print(f"  {key:45s} {value:10.3f}")


if __name__ == "__main__":
    main()
