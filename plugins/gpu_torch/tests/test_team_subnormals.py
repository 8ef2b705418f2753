"""Subnormals on torch's own CPU threads, for every torch kernel on the numpy CPU device
(``kernels/_team_fp.follow_step``), not only the fused elementwise one: a [256, 256]
MatMul of 1e-39 by 1e20 (oneDNN's product, on two threads) is 0 everywhere in a flushing
step (TensorFlow's value: the input reads as 0) and 2.56e-17 everywhere with
``flush_denormals=False`` (IEEE), whichever came first in the process and whether or not
user code had started torch's threads before. Before, half the rows (those of torch's
second thread) kept the other mode. Each history runs in a fresh process: torch's
threads are made once per calling thread and kept."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from kernloom_cpu_numpy.denormals import FLUSH_SUPPORTED

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import torch
    import kernloom as kl

    if sys.argv[1] == "torch-first":  # user code starts torch's threads outside any step
        torch.set_num_threads(2)
        (torch.ones(512, 512) @ torch.ones(512, 512)).sum()
    n = int(sys.argv[2])
    a = np.full((n, n), 1e-39, np.float32)
    b = np.full((n, n), 1e20, np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [n, n])
        y = kl.placeholder(kl.float32, [n, n])
        z = kl.ops.mat_mul(x, y)

    def nonzero(flush):
        config = kl.SessionConfig(flush_denormals=flush, intra_op_threads=2)
        with kl.Session(graph=g, config=config) as sess:
            return int(np.count_nonzero(sess.run(z, {x: a, y: b})))

    counts = [nonzero(True), nonzero(False), nonzero(True)]
    torch.set_num_threads(2)  # user code after the steps: IEEE subnormals on every thread
    after = int(torch.count_nonzero(torch.from_numpy(a) @ torch.from_numpy(b)))
    print(json.dumps({"counts": counts, "after": after}))
    """
)


@pytest.mark.skipif(not FLUSH_SUPPORTED, reason="this machine cannot flush subnormals")
@pytest.mark.parametrize("size", [64, 256])  # (torch splits a 64x64x64 product already)
@pytest.mark.parametrize("history", ["fresh", "torch-first"])
def test_torch_s_threads_follow_each_step_s_flush_mode(history: str, size: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, history, str(size)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    everything = size * size
    assert result == {"counts": [0, everything, 0], "after": everything}
