"""``kernloom run`` and ``kernloom demo`` with the installed numpy CPU plugin."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import kernloom as kl
from kernloom.cli import main


@pytest.fixture(autouse=True)
def _only_the_numpy_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI loads the installed plugins: these tests see the numpy plugin alone,
    whatever else is installed beside it (vendors run our tests beside theirs)."""
    monkeypatch.setenv("KERNLOOM_PLUGINS", "cpu_numpy")
    for var in ("KERNLOOM_DISABLE_PLUGINS", "KERNLOOM_STRICT_PLUGINS", "KERNLOOM_DEVICE_FACTORY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """A saved graph y = relu(x @ w), with x in a .npy file."""
    w = np.arange(6, dtype=np.float32).reshape(3, 2) - 2
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        kl.ops.relu(kl.ops.mat_mul(x, kl.constant(w, name="w"), name="xw"), name="y")
    graph = tmp_path / "graph.json"
    g.save(graph)
    xv = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    feed = tmp_path / "x.npy"
    np.save(feed, xv)
    return graph, feed, xv, np.maximum(xv @ w, 0)


def invoke(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_writes_each_fetch_to_its_npy(
    saved: tuple[Path, Path, np.ndarray, np.ndarray],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    graph, feed, xv, expected = saved
    y, xw = tmp_path / "y.npy", tmp_path / "xw.npy"
    code, out, err = invoke(
        capsys,
        "run",
        str(graph),
        "--feed",
        f"x={feed}",
        "--fetch",
        "y",
        "--fetch",
        "xw:0",
        "--out",
        str(y),
        "--out",
        str(xw),
        "--label",
        "MatMul=einsum",
        "--device-filter",
        "CPU",
    )
    assert (code, err) == (0, "")
    np.testing.assert_allclose(np.load(y), expected, rtol=1e-6)
    np.testing.assert_allclose(np.load(xw), xv @ (np.arange(6).reshape(3, 2) - 2), rtol=1e-6)
    assert f"y (float32, shape [4, 2]) written to {y}" in out


def test_run_prints_values_explains_and_traces(
    saved: tuple[Path, Path, np.ndarray, np.ndarray],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    graph, feed, _, expected = saved
    trace = tmp_path / "trace.json"
    code, out, _ = invoke(
        capsys,
        "run",
        str(graph),
        "--feed",
        f"x={feed}",
        "--fetch",
        "y",
        "--explain",
        "--trace",
        str(trace),
    )
    assert code == 0
    assert "xw (MatMul) -> /job:localhost/replica:0/task:0/device:CPU:0" in out
    assert "y (float32, shape [4, 2]):" in out
    assert np.array2string(expected, threshold=50).splitlines()[0] in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"xw", "y", "w"} <= {e["name"] for e in events if e["ph"] == "X"}


def test_run_writes_all_fetches_to_one_npz(
    saved: tuple[Path, Path, np.ndarray, np.ndarray],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    graph, feed, _, expected = saved
    out = tmp_path / "all.npz"
    code, _, _ = invoke(
        capsys,
        "run",
        str(graph),
        "--feed",
        f"x={feed}",
        "--fetch",
        "y",
        "--fetch",
        "w",
        "--out",
        str(out),
    )
    assert code == 0
    with np.load(out) as archive:
        np.testing.assert_allclose(archive["y"], expected, rtol=1e-6)
        assert archive["w"].shape == (3, 2)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--feed", "x"], "--feed 'x': expected NAME=VALUE"),
        (["--feed", "x=missing.npy"], "--feed x=missing.npy: no such file"),
        (["--feed", "x=BAD"], "not a .npy file"),
        (
            ["--feed", "x=X", "--fetch", "yy"],
            "fetch 'yy' is not a node of the graph. Did you mean 'y'?",
        ),
        (["--feed", "z=X"], "feed 'z' is not a node"),
        (["--feed", "x=X", "--label", "MatMul=fast"], "op MatMul has no kernel labelled 'fast'"),
        (["--feed", "x=X", "--device-filter", "GPU"], "'GPU' matches no device"),
        (["--feed", "x=X", "--out", "a.npy", "--out", "b.npy"], "1 --fetch but 2 --out"),
        (["--fetch", "y"], "placeholder 'x' (float32, shape (?, 3)) must be fed"),
    ],
)
def test_run_explains_every_bad_argument(
    saved: tuple[Path, Path, np.ndarray, np.ndarray],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    graph, feed, _, _ = saved
    bad = tmp_path / "BAD"
    bad.write_text("not numpy")
    argv = [a.replace("=X", f"={feed}").replace("=BAD", f"={bad}") for a in extra]
    if "--fetch" not in argv:
        argv += ["--fetch", "y"]
    code, _, err = invoke(capsys, "run", str(graph), *argv)
    assert code == 2
    assert message in err.replace("\n", " ")


def test_run_rejects_missing_and_broken_graph_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = invoke(capsys, "run", str(tmp_path / "none.json"), "--fetch", "y")
    assert code == 2 and "cannot read the graph file" in err
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    code, _, err = invoke(capsys, "run", str(broken), "--fetch", "y")
    assert code == 2 and "broken.json" in err


def test_run_reports_a_failing_kernel_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None], name="x")  # the size is known only at run time
        kl.ops.reshape(x, kl.constant(np.array([3], np.int32)), name="y")
    graph = tmp_path / "g.json"
    g.save(graph)
    feed = tmp_path / "x.npy"
    np.save(feed, np.ones(2, np.float32))
    code, _, err = invoke(capsys, "run", str(graph), "--feed", f"x={feed}", "--fetch", "y")
    assert code == 1
    assert "the run failed" in err and "node 'y' (op Reshape)" in err


def test_demo_runs_checks_and_writes_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "demo.json"
    code, out, err = invoke(
        capsys, "demo", "--batch", "16", "--repeats", "2", "--trace", str(trace)
    )
    assert (code, err) == (0, "")
    assert "matches numpy" in out
    assert "label 'einsum'" in out
    assert "layer0/matmul (MatMul)" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert "probs" in {e["name"] for e in events}


def test_demo_lists_the_devices_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = invoke(
        capsys, "demo", "--batch", "4", "--repeats", "1", "--trace", str(tmp_path / "t.json")
    )
    assert code == 0
    device = "/job:localhost/replica:0/task:0/device:CPU:0"
    # Placement lines ("-> device") and the partition line ("device: 8 nodes") aside,
    # the device appears once: in the list of devices.
    listed = [
        line
        for line in out.splitlines()
        if device in line and f"-> {device}" not in line and f"{device}: " not in line
    ]
    assert listed == [f"  {device} (backend numpy)"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch", "0"], "argument --batch: must be from 1 to 65536, got 0"),
        (["--repeats", "-3"], "argument --repeats: must be from 1 to 10000, got -3"),
        (["--label", "a", "--label", "b"], "--label given twice with different values"),
        (["--label", "fast"], "(asked for by --label fast)"),
    ],
)
def test_demo_rejects_bad_arguments_in_its_own_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    base = ["--trace", str(tmp_path / "t.json")]
    base += [] if "--batch" in argv else ["--batch", "4"]
    base += [] if "--repeats" in argv else ["--repeats", "1"]
    try:
        code, _, err = invoke(capsys, "demo", *base, *argv)
    except SystemExit as exc:
        code, err = int(exc.code or 0), capsys.readouterr().err
    assert code == 2 and message in err.replace("\n", " ")


# -- the graph optimizer's flags, as kernloom optimize has them -------------------------------


@pytest.fixture
def dense(tmp_path: Path) -> tuple[Path, Path, np.ndarray]:
    """A saved y = relu(x @ w + b) (one _FusedMatMul when optimized), x in a .npy file, and
    y computed by numpy."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        mm = kl.ops.mat_mul(x, kl.constant(w), name="mm")
        kl.ops.relu(kl.ops.bias_add(mm, kl.constant(b), name="ba"), name="y")
    graph = tmp_path / "dense.json"
    g.save(graph)
    xv = rng.standard_normal((5, 3)).astype(np.float32)
    feed = tmp_path / "x.npy"
    np.save(feed, xv)
    return graph, feed, np.maximum(xv @ w + b, 0)


def _ran_ops(out: str) -> str:
    """The ops of the one partition, from ``--explain``'s "Partitions:" section."""
    line = out.splitlines()[out.splitlines().index("Partitions:") + 1]
    return line.partition(" nodes ")[2]


@pytest.mark.parametrize(
    ("flags", "ops", "report"),
    [
        ([], "(Const, _Arg, _FusedMatMul, _Retval)", "fused nodes:\n    y <- mm, ba, y"),
        (
            ["--no-optimizer"],
            "(BiasAdd, Const, MatMul, Relu, _Arg, _Retval)",
            "Graph optimizer: off\n",
        ),
        (
            ["--disable", "remapper"],
            "(BiasAdd, Const, MatMul, Relu, _Arg, _Retval)",
            "(disabled: remapper)",
        ),
    ],
)
def test_run_turns_the_optimizer_or_one_pass_off(
    dense: tuple[Path, Path, np.ndarray],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    ops: str,
    report: str,
) -> None:
    graph, feed, expected = dense
    y = tmp_path / "y.npy"
    argv = ["run", str(graph), "--feed", f"x={feed}", "--fetch", "y", "--out", str(y)]
    code, out, err = invoke(capsys, *argv, "--explain", *flags)
    assert (code, err) == (0, "")
    assert _ran_ops(out) == ops
    assert report in out
    assert "SessionConfig" not in out  # the CLI's words, not Python's
    np.testing.assert_allclose(np.load(y), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--disable", "constant_fold"],
            "no graph pass is named 'constant_fold'; passes: pruning, batch_norm_folding, "
            "constant_folding, arithmetic, cse, dead_branch, remapper, elementwise_fusion, "
            "pin_to_host. "
            "Did you mean 'constant_folding'? (asked for by --disable constant_fold)",
        ),
        (
            ["--no-optimizer", "--disable", "fusion"],
            "no graph pass is named 'fusion'; passes: pruning, batch_norm_folding, "
            "constant_folding, arithmetic, cse, dead_branch, remapper, elementwise_fusion, "
            "pin_to_host. "
            "(asked for by --disable fusion)",
        ),
    ],
)
def test_run_refuses_an_unknown_pass_before_reading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    missing = tmp_path / "not-read.json"  # the pass names are checked first
    code, out, err = invoke(capsys, "run", str(missing), "--fetch", "y", *flags)
    assert (code, out) == (2, "")
    assert err.replace("\n", " ").strip() == f"error: {message}"


@pytest.fixture
def saved_variable(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A saved graph y = x + v, where variable v starts as the fed n; 'init' initialises v."""
    g = kl.Graph()
    with g.as_default():
        n = kl.placeholder(kl.float32, [3], name="n")
        x = kl.placeholder(kl.float32, [3], name="x")
        v = kl.Variable(kl.ops.identity(n), name="v")
        kl.ops.identity(x + v.value(), name="y")
        kl.variables_initializer()  # node 'init'
    graph = tmp_path / "m.json"
    g.save(graph)
    np.save(tmp_path / "n.npy", np.array([1, 2, 3], np.float32))
    np.save(tmp_path / "x.npy", np.array([10, 20, 30], np.float32))
    return graph, tmp_path / "n.npy", tmp_path / "x.npy"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--fetch", "init"],
            "--fetch init: node 'init' (op NoOp) has no outputs, so there is no value to "
            "fetch; to run it, pass --init init instead (it runs before the fetches, in the "
            "same session)",
        ),
        (
            ["--fetch", "init", "--init", "init"],
            "--fetch init: node 'init' (op NoOp) has no outputs, so there is no value to "
            "fetch; --init init already runs it: drop this --fetch",
        ),
        (
            ["--fetch", "y", "--fetch", "init", "--out", "OUT/all.npz"],
            "--fetch init: node 'init' (op NoOp) has no outputs",
        ),
        (
            ["--fetch", "v", "--out", "OUT/v.npy", "--init", "init"],
            "--fetch v: 'v:0' (op VarHandleOp) is a resource handle, not a value, so --out "
            "cannot write it; fetch a value read from it instead, such as 'v/Read:0'",
        ),
        (
            ["--fetch", "y", "--fetch", "v:0", "--out", "OUT/all.npz", "--init", "init"],
            "--fetch v:0: 'v:0' (op VarHandleOp) is a resource handle",
        ),
    ],
    ids=["node", "node-and-init", "node-npz", "handle-npy", "handle-npz"],
)
def test_run_refuses_a_fetch_without_a_value_to_write_before_running(
    saved_variable: tuple[Path, Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    graph, n, x = saved_variable
    argv = [a.replace("OUT/", f"{tmp_path}/") for a in extra]
    code, out, err = invoke(
        capsys, "run", str(graph), "--feed", f"n={n}", "--feed", f"x={x}", *argv
    )
    assert (code, out) == (2, "")
    assert err.replace("\n", " ").startswith(f"error: {message}")
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "n.npy", "x.npy"]


def test_run_gives_the_init_nodes_the_feeds(
    saved_variable: tuple[Path, Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    graph, n, x = saved_variable
    out = tmp_path / "y.npy"
    code, _, err = invoke(
        capsys,
        "run",
        str(graph),
        "--feed",
        f"n={n}",
        "--feed",
        f"x={x}",
        "--init",
        "init",
        "--fetch",
        "y",
        "--out",
        str(out),
    )
    assert (code, err) == (0, "")
    np.testing.assert_array_equal(np.load(out), [11.0, 22.0, 33.0])  # x + n, by hand
