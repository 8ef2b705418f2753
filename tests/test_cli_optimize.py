"""``kernloom optimize GRAPH.json -o OUT.json [--explain]``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kernloom as kl
from kernloom.cli import main


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """y = relu((x + 1 + 2 + 3) @ w + b), saved."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 4], name="x")
        y = x
        for i in (1, 2, 3):
            y = kl.ops.add(y, kl.constant(np.float32(i)), name=f"add{i}")
        mm = kl.ops.mat_mul(y, kl.constant(w), name="mm")
        kl.ops.relu(kl.ops.bias_add(mm, kl.constant(b), name="ba"), name="y")
    path = tmp_path / "graph.json"
    g.save(path)
    return path, w, b


def invoke(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_optimize_writes_a_graph_that_computes_the_same(
    saved: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, w, b = saved
    out = tmp_path / "opt.json"
    code, text, err = invoke(capsys, "optimize", str(path), "-o", str(out), "--explain")
    assert (code, err) == (0, "")
    assert "remapper (round 1)" in text and "y <- mm + ba + y" in text
    assert "push-down: 2 node(s): add2, add3" in text
    assert f"written to {out}" in text
    optimized = kl.Graph.load(out)
    ops = sorted(n.op for n in optimized.nodes)
    assert ops == ["Add", "Const", "Const", "Const", "Placeholder", "_FusedMatMul"]
    assert optimized.node("y").attrs["_fused_from"] == ["mm", "ba", "y"]
    xv = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    with kl.Session(optimized, kl.SessionConfig(graph_optimizer=False)) as sess:
        got = sess.run("y:0", {"x:0": xv})
    np.testing.assert_allclose(got, np.maximum((xv + 6) @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_a_fetched_inner_node_survives(
    saved: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, *_ = saved
    out = tmp_path / "opt.json"
    code, _, _ = invoke(capsys, "optimize", str(path), "-o", str(out), "--fetch", "mm:0")
    assert code == 0
    names = {n.name for n in kl.Graph.load(out).nodes}
    assert "mm" in names  # fetched: not fused away


def test_disabling_every_pass_keeps_the_graph(
    saved: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, *_ = saved
    out = tmp_path / "opt.json"
    flags = [a for name in kl.optimizer.BUILTIN_PASS_NAMES for a in ("--disable", name)]
    code, text, _ = invoke(capsys, "optimize", str(path), "-o", str(out), "--explain", *flags)
    assert code == 0 and "no pass changed the graph" in text
    assert len(kl.Graph.load(out)) == len(kl.Graph.load(path))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.json", "-o", "{tmp}/o.json"], "missing.json: no such file"),
        (["{graph}", "-o", "{tmp}/nowhere/o.json"], "directory {tmp}/nowhere does not exist"),
        (["{graph}", "-o", "{graph}/o.json"], "{graph} is a file, not a directory"),
        (["{graph}", "-o", "{tmp}/o.json", "--disable", "cse2"], "no graph pass is named 'cse2'"),
        (["{graph}", "-o", "{tmp}/o.json", "--fetch", "nope:0"], "no node named 'nope'"),
    ],
)
def test_bad_arguments_are_usage_errors_naming_them(
    saved: tuple[Path, np.ndarray, np.ndarray],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    path, *_ = saved
    argv = [a.format(graph=path, tmp=tmp_path) for a in args]
    code, _, err = invoke(capsys, "optimize", *argv)
    assert code == 2
    assert message.format(graph=path, tmp=tmp_path) in err
