"""A training-style update loop on variables: linear regression by gradient descent.

The weights are ``kl.Variable``s; every ``Session.run`` of ``train`` runs a
``kl.while_loop`` of ``steps_per_run`` gradient steps, each one an ``assign_sub`` on the
variables, so the state lives in the session between runs. The gradient is written out
by hand (kernloom has no autodiff yet). The result is checked against the same updates
done in numpy and against the least-squares solution.

    .venv/bin/python examples/train_linear_regression.py [--runs 20] [--steps-per-run 50]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import kernloom as kl
from kernloom import ops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps-per-run", type=int, default=50)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(3)
    features = rng.standard_normal((256, 4)).astype(np.float32)
    true_w = np.array([[1.5], [-2.0], [0.5], [3.0]], np.float32)
    labels = features @ true_w + 0.7 + 0.01 * rng.standard_normal((256, 1)).astype(np.float32)

    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 4], name="x")
        y = kl.placeholder(kl.float32, [None, 1], name="y")
        lr = kl.placeholder(kl.float32, [], name="learning_rate")
        w = kl.Variable(np.zeros((4, 1), np.float32), name="w")
        b = kl.Variable(np.float32(0.0), name="b")
        scale = 2.0 / len(features)

        def step(i: kl.Tensor) -> kl.Tensor:
            error = ops.mat_mul(x, w) + b - y  # reads the variables' current values
            grad_w = ops.mat_mul(x, error, transpose_a=True) * scale
            grad_b = ops.sum(error, [0, 1]) * scale
            with kl.control_dependencies([w.assign_sub(grad_w * lr), b.assign_sub(grad_b * lr)]):
                return i + 1

        (train,) = kl.while_loop(lambda i: i < args.steps_per_run, step, [0], parallel_iterations=1)
        loss = ops.mean(ops.square(ops.mat_mul(x, w) + b - y), [0, 1])
        init = kl.variables_initializer()

    feed = {x: features, y: labels}
    ref_w, ref_b = np.zeros((4, 1), np.float32), np.float32(0.0)
    with kl.Session(g) as session:
        session.run(init)
        for run in range(args.runs):
            session.run(train, {**feed, lr: args.learning_rate})
            for _ in range(args.steps_per_run):
                error = features @ ref_w + ref_b - labels
                ref_w = ref_w - (features.T @ error * np.float32(2.0 / len(features))) * np.float32(
                    args.learning_rate
                )
                ref_b = ref_b - np.float32(error.sum() * 2.0 / len(features)) * np.float32(
                    args.learning_rate
                )
            if run % 5 == 4 or run == args.runs - 1:
                print(f"run {run + 1:3d}: loss {float(session.run(loss, feed)):.6f}")
        got_w, got_b = session.run([w.value(), b.value()])
    solution, *_ = np.linalg.lstsq(np.hstack([features, np.ones((256, 1), np.float32)]), labels)
    print("weights:", np.round(got_w.ravel(), 4), "bias:", round(float(got_b), 4))
    print("least squares:", np.round(solution.ravel(), 4))
    same_as_numpy = np.allclose(got_w, ref_w, rtol=1e-4, atol=1e-5) and abs(got_b - ref_b) < 1e-4
    converged = np.allclose(np.append(got_w, got_b), solution.ravel(), atol=1e-3)
    print("OK" if same_as_numpy and converged else "MISMATCH")
    return 0 if same_as_numpy and converged else 1


if __name__ == "__main__":
    sys.exit(main())
