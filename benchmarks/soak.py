"""Soak test of sessions under load: not part of ``make test`` (it runs for minutes).

    .venv/bin/python benchmarks/soak.py                       # the full soak (numbers in SOAK.md)
    .venv/bin/python benchmarks/soak.py --runs 50 --rss-runs 1000    # a quick look

Three phases, each of which fails loudly (exit 1) on a violation:

1. **No lost update**: ``--threads`` threads each run ``--runs`` steps of one session that
   ``assign_add`` 1 to a variable and compute on a feed; the variable must end at exactly
   threads x runs, and every fetched value must match numpy.
2. **Close under load**: the same threads run against a session that another thread
   closes and replaces every ``--reopen-every-s`` seconds. Every run must either succeed
   with a correct value or fail with ``CancelledError("session closed")`` (or the
   closed-session error, for a run that started after the close); nothing may hang, and
   no inter-op thread may outlive its session.
3. **Memory**: ``--rss-runs`` runs on one session (feeds, fetches, variable updates, a
   small MLP), with the process's resident set size sampled every tenth of them; the
   growth after the first tenth must stay under ``--rss-limit-mb``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any

import numpy as np

import kernloom as kl


def rss_mb() -> float:
    """The resident set size now (Linux: /proc/self/statm), in MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def build() -> tuple[kl.Graph, dict[str, Any]]:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((32, 64)).astype(np.float32) / 6
    w2 = rng.standard_normal((64, 10)).astype(np.float32) / 8
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 32], name="x")
        counter = kl.Variable(np.array(0, np.int64), name="counter")
        w = kl.Variable(w1, name="w1")
        bumped = counter.assign_add(np.array(1, np.int64))
        probs = kl.ops.softmax(kl.ops.relu(x @ w.value()) @ kl.constant(w2))
        init = kl.variables_initializer()
    return g, {
        "x": x,
        "counter": counter,
        "bumped": bumped,
        "probs": probs,
        "init": init,
        "w1": w1,
        "w2": w2,
    }


def reference(xv: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    h = np.maximum(xv @ w1, 0) @ w2
    e = np.exp(h - h.max(axis=1, keepdims=True))
    probs: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return probs


def inter_op_threads() -> int:
    return sum(t.name.startswith("kernloom-inter-op") for t in threading.enumerate())


def phase_lost_updates(threads: int, runs: int, inter_op: int) -> dict[str, float]:
    g, t = build()
    config = kl.SessionConfig(inter_op_threads=inter_op)
    errors: list[BaseException] = []
    xv = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
    expected = reference(xv, t["w1"], t["w2"])
    with kl.Session(g, config) as sess:
        sess.run(t["init"])

        def work() -> None:
            try:
                for _ in range(runs):
                    _, p = sess.run([t["bumped"], t["probs"]], {t["x"]: xv})
                    if not np.allclose(p, expected, rtol=1e-4, atol=1e-6):
                        raise AssertionError("a fetched value differs from numpy's")
            except BaseException as exc:
                errors.append(exc)

        started = time.perf_counter()
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(600)
        elapsed = time.perf_counter() - started
        if any(w.is_alive() for w in workers):
            raise SystemExit("phase 1: a run hung")
        if errors:
            raise SystemExit(f"phase 1: {len(errors)} run(s) failed; first: {errors[0]!r}")
        final = int(sess.run(t["counter"].value()))
    if final != threads * runs:
        raise SystemExit(f"phase 1: lost updates: counter {final}, expected {threads * runs}")
    return {"runs": threads * runs, "seconds": elapsed, "runs_per_s": threads * runs / elapsed}


def phase_close_under_load(
    threads: int, runs: int, inter_op: int, reopen_every_s: float
) -> dict[str, float]:
    g, t = build()
    config = kl.SessionConfig(inter_op_threads=inter_op)
    baseline_threads = inter_op_threads()
    xv = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
    expected = reference(xv, t["w1"], t["w2"])

    def open_session() -> kl.Session:
        sess = kl.Session(g, config)
        sess.run(t["init"])
        return sess

    current = [open_session()]
    stop = threading.Event()
    counts = {"ok": 0, "cancelled": 0, "closed": 0, "sessions": 1}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(runs):
                sess = current[0]
                try:
                    _, p = sess.run([t["bumped"], t["probs"]], {t["x"]: xv})
                except kl.CancelledError as exc:
                    if "session closed" not in str(exc):
                        raise
                    kind = "cancelled"
                except kl.KernloomError as exc:
                    if "this session is closed" not in str(exc):
                        raise
                    kind = "closed"
                else:
                    if not np.allclose(p, expected, rtol=1e-4, atol=1e-6):
                        raise AssertionError("a fetched value differs from numpy's")
                    kind = "ok"
                with lock:
                    counts[kind] += 1
        except BaseException as exc:
            errors.append(exc)

    def reopen() -> None:
        while not stop.wait(reopen_every_s):
            old = current[0]
            current[0] = open_session()
            old.close()
            counts["sessions"] += 1

    closer = threading.Thread(target=reopen)
    workers = [threading.Thread(target=work) for _ in range(threads)]
    started = time.perf_counter()
    closer.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join(600)
    stop.set()
    closer.join(60)
    elapsed = time.perf_counter() - started
    if any(w.is_alive() for w in workers) or closer.is_alive():
        raise SystemExit("phase 2: a run or the closer hung")
    if errors:
        raise SystemExit(f"phase 2: {len(errors)} unexpected error(s); first: {errors[0]!r}")
    current[0].close()
    leaked = inter_op_threads() - baseline_threads
    if leaked > 0:
        time.sleep(1.0)  # workers told to stop may still be returning
        leaked = inter_op_threads() - baseline_threads
    if leaked > 0:
        raise SystemExit(f"phase 2: {leaked} inter-op thread(s) outlived their sessions")
    return {**{k: float(v) for k, v in counts.items()}, "seconds": elapsed}


def phase_memory(runs: int, inter_op: int, limit_mb: float) -> dict[str, float]:
    g, t = build()
    config = kl.SessionConfig(inter_op_threads=inter_op)
    rng = np.random.default_rng(3)
    samples: list[float] = []
    with kl.Session(g, config) as sess:
        sess.run(t["init"])
        run_probs = sess.make_callable(t["probs"], [t["x"]])
        every = max(1, runs // 10)
        started = time.perf_counter()
        for i in range(runs):
            xv = rng.standard_normal((16, 32)).astype(np.float32)
            if i % 3 == 0:
                sess.run([t["bumped"], t["probs"]], {t["x"]: xv})
            elif i % 3 == 1:
                run_probs(xv)
            else:
                md = kl.RunMetadata()
                sess.run(t["probs"], {t["x"]: xv.tolist()}, kl.RunOptions(trace=True), md)
            if i % every == every - 1:
                samples.append(rss_mb())
        elapsed = time.perf_counter() - started
        if int(sess.run(t["counter"].value())) != (runs + 2) // 3:
            raise SystemExit("phase 3: the counter lost updates")
    growth = samples[-1] - samples[0]
    if growth > limit_mb:
        raise SystemExit(f"phase 3: RSS grew {growth:.1f} MiB over {runs} runs: {samples}")
    return {
        "runs": runs,
        "seconds": elapsed,
        "rss_first_mb": samples[0],
        "rss_last_mb": samples[-1],
        "rss_max_mb": max(samples),
        "growth_mb": growth,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--runs", type=int, default=500, help="runs per thread")
    parser.add_argument("--inter-op-threads", type=int, default=2)
    parser.add_argument("--reopen-every-s", type=float, default=0.05)
    parser.add_argument("--rss-runs", type=int, default=10_000)
    parser.add_argument("--rss-limit-mb", type=float, default=20.0)
    args = parser.parse_args(argv)
    print(
        f"kernloom soak: {args.threads} threads x {args.runs} runs, inter_op_threads="
        f"{args.inter_op_threads}, {os.cpu_count()} cores, numpy {np.__version__}"
    )
    one = phase_lost_updates(args.threads, args.runs, args.inter_op_threads)
    print(
        f"1 no lost update : {one['runs']:.0f} runs in {one['seconds']:.1f} s "
        f"({one['runs_per_s']:.0f}/s); counter exact"
    )
    two = phase_close_under_load(
        args.threads, args.runs, args.inter_op_threads, args.reopen_every_s
    )
    print(
        f"2 close under load: {two['sessions']:.0f} sessions, {two['ok']:.0f} runs ok, "
        f"{two['cancelled']:.0f} cancelled by close, {two['closed']:.0f} refused after "
        f"close, in {two['seconds']:.1f} s; no hang, no leaked thread, no other error"
    )
    three = phase_memory(args.rss_runs, args.inter_op_threads, args.rss_limit_mb)
    print(
        f"3 memory          : {three['runs']:.0f} runs in {three['seconds']:.1f} s; RSS "
        f"{three['rss_first_mb']:.1f} -> {three['rss_last_mb']:.1f} MiB (max "
        f"{three['rss_max_mb']:.1f}; growth {three['growth_mb']:+.1f} MiB after the first "
        f"tenth)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
