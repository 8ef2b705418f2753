"""The executor's cost per loop iteration: a ``kl.while_loop`` with a trivial body
(``i + 1`` while ``i < n``) run for 10,000 iterations, next to TensorFlow 1's
``tf.compat.v1.while_loop`` in a ``Session`` when TensorFlow is importable (by this
interpreter, or by the one named in ``KERNLOOM_TF_PYTHON``), and a plain Python loop.

    .venv/bin/python benchmarks/bench_loop.py
    KERNLOOM_TF_PYTHON=/tmp/tfvenv/bin/python .venv/bin/python benchmarks/bench_loop.py

Each number is the best of several runs, in microseconds per iteration; the ratio is
kernloom's time over TensorFlow's, measured in the same run of this script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from bench_runtime import best_of  # the script's own folder is on sys.path

ITERATIONS = 10_000

TF_CHILD = """
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
n_iter = int(sys.argv[1])
config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
g = tf.Graph()
with g.as_default():
    n = tf.compat.v1.placeholder(tf.int32, [])
    out = tf.compat.v1.while_loop(lambda i: i < n, lambda i: i + 1, [tf.constant(0)])
with tf.compat.v1.Session(graph=g, config=config) as s:
    assert s.run(out, {n: n_iter}) == n_iter
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter(); s.run(out, {n: n_iter}); best = min(best, time.perf_counter() - t)
print(json.dumps({"tf_us": best / n_iter * 1e6, "tf_version": tf.__version__}))
"""


def kernloom_us() -> float:
    import kernloom as kl

    g = kl.Graph()
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        (out,) = kl.while_loop(lambda i: i < n, lambda i: i + 1, [0])
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as s:
        assert s.run(out, {n: ITERATIONS}) == ITERATIONS
        return best_of(lambda: s.run(out, {n: ITERATIONS}), 5, 1) / ITERATIONS * 1e6


def python_us() -> float:
    import numpy as np

    def loop() -> None:
        i = np.int32(0)
        n = np.int32(ITERATIONS)
        while np.less(i, n):
            i = np.add(i, np.int32(1))

    return best_of(loop, 5, 1) / ITERATIONS * 1e6


def tensorflow() -> dict[str, Any] | None:
    candidates = [os.environ.get("KERNLOOM_TF_PYTHON"), sys.executable]
    for python in filter(None, candidates):
        try:
            done = subprocess.run(
                [python, "-c", TF_CHILD, str(ITERATIONS)],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
            return result
    return None


def main() -> int:
    ours = kernloom_us()
    plain = python_us()
    print(f"while_loop, {ITERATIONS} iterations of i + 1, one inter-op thread:")
    print(f"  kernloom            {ours:8.2f} us/iteration")
    print(f"  numpy Python loop   {plain:8.2f} us/iteration   (kernloom {ours / plain:.1f}x)")
    tf = tensorflow()
    if tf is None:
        print(
            "  TensorFlow          not importable (set KERNLOOM_TF_PYTHON to a python that has it)"
        )
    else:
        print(
            f"  TensorFlow {tf['tf_version']:8s} {tf['tf_us']:8.2f} us/iteration   "
            f"(kernloom / TensorFlow = {ours / tf['tf_us']:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
