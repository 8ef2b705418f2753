"""``kernloom optimize GRAPH.json -o OUT.json [--explain]``."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
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
    _assert_computes_the_model(
        optimized, np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32), w, b
    )


def _assert_computes_the_model(
    graph: kl.Graph, xv: np.ndarray, w: np.ndarray, b: np.ndarray
) -> None:
    """The saved graph, run as written (optimizer off), gives relu((x + 6) @ w + b)."""
    with kl.Session(graph, kl.SessionConfig(graph_optimizer=False)) as sess:
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
        (["{graph}", "-o", "{tmp}/o.json", "--fetch", "nope:0"], "--fetch nope:0: the graph has"),
        # printed as typed: rich would show the emoji code ':x:' as a cross
        (["{graph}", "-o", "{tmp}/o.json", "--fetch", "y:x:"], "--fetch y:x:: tensor name 'y:x:'"),
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


NOT_A_GRAPH = (
    "not a kernloom graph: the JSON object has no 'nodes' list ({keys}). A graph file is "
    'what Graph.save() writes: {{"format": "kernloom.GraphDef", "version": 1, "nodes": '
    "[...]}}. Save the graph with Graph.save(), or convert an ONNX model with `kernloom "
    "convert MODEL.onnx GRAPH.json`."
)


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("{}", "no keys at all"),
        ('{"format": "kernloom.GraphDef", "version": 1}', "keys ['format', 'version']"),
        ('{"graph": {"node": []}}', "keys ['graph']"),
    ],
)
@pytest.mark.parametrize("command", ["optimize", "run", "compare"])
def test_a_json_object_that_is_not_a_graph_is_refused_saying_what_a_graph_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, text: str, keys: str
) -> None:
    """``{}`` was an empty graph (the schema's defaults), written out as one: every command
    that reads GRAPH.json refuses it, naming the file, with what a graph file holds."""
    path = tmp_path / "not_a_graph.json"
    path.write_text(text)
    out = tmp_path / "out.json"
    argv = {
        "optimize": ["-o", str(out)],
        "run": ["--fetch", "y"],
        "compare": [],
    }[command]
    code, _, err = invoke(capsys, command, str(path), *argv)
    assert code == 2
    assert err == f"error: {path}: {NOT_A_GRAPH.format(keys=keys)}\n"
    assert not out.exists()


def test_a_saved_empty_graph_is_still_a_graph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, out = tmp_path / "empty.json", tmp_path / "out.json"
    kl.Graph().save(path)
    code, text, err = invoke(capsys, "optimize", str(path), "-o", str(out))
    assert (code, err) == (0, "")
    assert f"0 -> 0 nodes; written to {out}" in text
    assert len(kl.Graph.load(out)) == 0


# -- -o is written as kernloom run writes --out --------------------------------------------


def test_an_existing_output_is_replaced_only_with_force(
    saved: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, *_ = saved
    out = tmp_path / "opt.json"
    out.write_text("keep me")
    code, text, err = invoke(capsys, "optimize", str(path), "-o", str(out))
    assert (code, text) == (2, "")
    assert err.strip() == f"error: -o {out}: the file exists; pass --force to replace it"
    assert out.read_text() == "keep me"
    code, text, err = invoke(capsys, "optimize", str(path), "-o", str(out), "--force")
    assert (code, err) == (0, "") and f"written to {out}" in text
    assert kl.Graph.load(out).node("y").op == "_FusedMatMul"


def test_the_graph_itself_is_replaced_only_with_force(
    saved: tuple[Path, np.ndarray, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    path, w, b = saved
    code, _, err = invoke(capsys, "optimize", str(path), "-o", str(path))
    assert code == 2 and "the file exists; pass --force" in err
    assert kl.Graph.load(path).node("y").op == "Relu"
    code, _, _ = invoke(capsys, "optimize", str(path), "-o", str(path), "--force")
    assert code == 0
    _assert_computes_the_model(kl.Graph.load(path), np.ones((2, 4), np.float32), w, b)


def test_a_directory_as_output_asks_for_a_file_name(
    saved: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, *_ = saved
    code, _, err = invoke(capsys, "optimize", str(path), "-o", str(tmp_path), "--force")
    assert code == 2
    assert err.strip() == (
        f"error: -o {tmp_path}: is a directory; give a file name, e.g. "
        f"{tmp_path / 'optimized.json'}"
    )


# -- --disable: the same names and message as kernloom run ----------------------------------


def test_an_unknown_pass_lists_the_passes_in_the_flag_s_words(
    saved: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, *_ = saved
    out = tmp_path / "o.json"
    code, _, err = invoke(capsys, "optimize", str(path), "-o", str(out), "--disable", "remaper")
    assert code == 2 and not out.exists()
    plugins = "".join(f", {p.graph_pass.name}" for p in klp.default_registry().graph_passes)
    assert err.replace("\n", " ").strip() == (
        "error: no graph pass is named 'remaper'; passes: pruning, batch_norm_folding, "
        "constant_folding, arithmetic, cse, dead_branch, remapper, elementwise_fusion, "
        f"pin_to_host{plugins}. "
        "Did you mean 'remapper'? (asked for by --disable remaper)"
    )
    # The same words from kernloom run, which has the same flag.
    code, _, run_err = invoke(capsys, "run", str(path), "--fetch", "y", "--disable", "remaper")
    assert code == 2 and run_err == err


def test_disabled_passes_do_not_run(
    saved: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, *_ = saved
    out = tmp_path / "o.json"
    argv = ["optimize", str(path), "-o", str(out), "--explain"]
    code, text, _ = invoke(capsys, *argv, "--disable", "remapper", "--disable", "remapper")
    assert code == 0 and "(disabled: remapper)" in text and "remapper (round" not in text
    ops = {n.name: n.op for n in kl.Graph.load(out).nodes}
    assert (ops["mm"], ops["ba"], ops["y"]) == ("MatMul", "BiasAdd", "Relu")
    assert ops["add3"] == "Add"  # arithmetic still ran: x + (1 + 2 + 3)


# -- the guide's commands --------------------------------------------------------------------


def test_the_guide_s_commands_print_what_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/optimizer.md runs ``kernloom optimize`` on the graph its Python examples save and
    shows the output: the commands run here, after those examples, and print that output
    (times aside)."""
    from test_docs import code_blocks, run_blocks

    guide = Path(__file__).resolve().parents[1] / "docs" / "optimizer.md"
    blocks = code_blocks(guide.read_text())
    monkeypatch.chdir(tmp_path)
    run_blocks(guide, blocks)
    capsys.readouterr()
    shown = [
        (block, following)
        for block, following in itertools.pairwise(blocks)
        if block.info[:1] == ("sh",) and following.info[:1] == ("text",)
    ]
    assert shown, "docs/optimizer.md shows no kernloom command with its output"

    def untimed(text: str) -> str:
        return re.sub(r"\d+\.\d+ ms", "T ms", text).strip()

    for block, output in shown:
        printed = []
        for line in block.code.splitlines():
            argv = shlex.split(line, comments=True)
            if not argv:
                continue
            assert argv[0] == "kernloom", line
            code, out, err = invoke(capsys, *argv[1:])
            assert (code, err) == (0, ""), line
            printed.append(out)
        assert untimed("".join(printed)) == untimed(output.code), f"line {block.line}"
