"""The dominant eigenvalue of a symmetric matrix by power iteration, as one kernloom graph.

The whole iteration is a ``kl.while_loop``: each step multiplies the vector by the
matrix, normalises it, and measures how much the Rayleigh quotient moved; the loop ends
when it moves less than ``tol`` (or after ``max_iterations``). The result is checked
against ``numpy.linalg.eigvalsh``.

    .venv/bin/python examples/power_iteration.py [--size 64] [--tol 1e-6]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import kernloom as kl
from kernloom import ops


def build(
    size: int, tol: float, max_iterations: int
) -> tuple[kl.Graph, kl.Tensor, dict[str, kl.Tensor]]:
    g = kl.Graph()
    with g.as_default():
        a = kl.placeholder(kl.float64, [size, size], name="matrix")
        v0 = kl.placeholder(kl.float64, [size, 1], name="start")

        def keep_going(
            i: kl.Tensor, v: kl.Tensor, value: kl.Tensor, change: kl.Tensor
        ) -> kl.Tensor:
            return ops.greater(change, tol)

        def step(
            i: kl.Tensor, v: kl.Tensor, value: kl.Tensor, change: kl.Tensor
        ) -> tuple[kl.Tensor, ...]:
            w = ops.mat_mul(a, v)
            norm = ops.sqrt(ops.sum(w * w, [0, 1]))
            v_next = w / norm
            rayleigh = ops.sum(v_next * ops.mat_mul(a, v_next), [0, 1])
            moved = ops.maximum(rayleigh - value, value - rayleigh)
            return i + 1, v_next, rayleigh, moved

        iterations, vector, value, _ = kl.while_loop(
            keep_going,
            step,
            [0, v0, kl.constant(0.0, kl.float64), kl.constant(np.inf, kl.float64)],
            maximum_iterations=max_iterations,
            parallel_iterations=1,
        )
    return g, a, {"iterations": iterations, "vector": vector, "value": value, "start": v0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--max-iterations", type=int, default=10_000)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(7)
    # A symmetric matrix with a clear gap between its two largest eigenvalues.
    q, _ = np.linalg.qr(rng.standard_normal((args.size, args.size)))
    spectrum = np.linspace(1.0, 5.0, args.size)
    spectrum[-1] = 8.0
    matrix = (q * spectrum) @ q.T
    start = rng.standard_normal((args.size, 1))
    g, a, out = build(args.size, args.tol, args.max_iterations)
    with kl.Session(g) as session:
        iterations, value, vector = session.run(
            [out["iterations"], out["value"], out["vector"]], {a: matrix, out["start"]: start}
        )
    expected = float(np.linalg.eigvalsh(matrix)[-1])
    residual = float(np.linalg.norm(matrix @ vector - value * vector))
    print(f"dominant eigenvalue: {float(value):.12f} after {int(iterations)} iterations")
    print(f"numpy eigvalsh:      {expected:.12f}   |difference| {abs(float(value) - expected):.2e}")
    print(f"residual |Av - lv|:  {residual:.2e}")
    ok = abs(float(value) - expected) <= 1e-8 * abs(expected) and residual < 1e-4
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
