"""``kernloom run model.onnx``, ``kernloom convert`` and ``kernloom ops --onnx``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_helpers import FLOAT, model

import kernloom as kl
from kernloom.cli import main


def _model_file(tmp_path: Path) -> Path:
    proto = model(
        [
            helper.make_node("MatMul", ["data/0", "w"], ["h"]),
            helper.make_node("Relu", ["h"], ["prob"]),
        ],
        {"data/0": (FLOAT, [2, 3])},
        {"prob": (FLOAT, [2, 2])},
        initializers={"w": np.array([[1, -1], [2, 0], [0, 3]], np.float32)},
    )
    path = tmp_path / "tiny.onnx"
    onnx.save(proto, str(path))
    return path


def test_run_an_onnx_model_by_its_input_and_output_names(tmp_path: Path) -> None:
    path = _model_file(tmp_path)
    x = np.array([[1, 2, 3], [-1, 0, 1]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "prob.npy"
    code = main(
        [
            "run",
            str(path),
            "--feed",
            f"data/0={tmp_path / 'x.npy'}",
            "--fetch",
            "prob",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    w = np.array([[1, -1], [2, 0], [0, 3]], np.float32)
    np.testing.assert_array_equal(np.load(out), np.maximum(x @ w, 0))


def test_run_takes_onnx_names_that_became_other_node_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tf2onnx's ``x:0`` and torch's ``onnx::Add_3`` are not kernloom node names (the
    importer renames them); ``--feed`` and ``--fetch`` take them by their ONNX names all the
    same, as the README says, and the result is shown under the name given."""
    proto = model(
        [helper.make_node("Add", ["x:0", "onnx::Add_3"], ["out:0"])],
        {"x:0": (FLOAT, [2]), "onnx::Add_3": (FLOAT, [2])},
        {"out:0": (FLOAT, [2])},
    )
    path = tmp_path / "renamed.onnx"
    onnx.save(proto, str(path))
    np.save(tmp_path / "a.npy", np.array([1, 2], np.float32))
    np.save(tmp_path / "b.npy", np.array([10, 20], np.float32))
    out = tmp_path / "out.npy"
    args = ["run", str(path), "--feed", f"x:0={tmp_path / 'a.npy'}"]
    args += ["--feed", f"onnx::Add_3={tmp_path / 'b.npy'}", "--fetch", "out:0"]
    assert main(args) == 0
    assert "out:0 (float32, shape [2])" in capsys.readouterr().out
    assert main([*args, "--out", str(out)]) == 0
    np.testing.assert_array_equal(np.load(out), [11, 22])


def test_convert_writes_a_graph_that_loads_and_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _model_file(tmp_path)
    target = tmp_path / "tiny.json"
    assert main(["convert", str(path), str(target)]) == 0
    assert "feed: data/0; fetch: prob" in capsys.readouterr().out
    graph = kl.Graph.load(target)
    with kl.Session(graph) as session:
        (y,) = session.run(["prob"], {"data/0": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(y, [[3, 2], [3, 2]])
    assert main(["convert", str(path), str(target)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err


def test_convert_writes_no_node_that_no_output_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Reshape's shape computed from constants (``Add(a, b)``, as torch's exports write
    shape arithmetic) is computed at import and the Reshape takes it as a constant: the
    Add then feeds nothing, and is not written to the graph file."""
    proto = model(
        [
            helper.make_node("Add", ["a", "b"], ["shape"]),
            helper.make_node("Reshape", ["x", "shape"], ["y"]),
        ],
        {"x": (FLOAT, [2, 3])},
        {"y": (FLOAT, [3, 2])},
        initializers={"a": np.array([1, 1], np.int64), "b": np.array([2, 1], np.int64)},
    )
    path = tmp_path / "folded.onnx"
    onnx.save(proto, str(path))
    target = tmp_path / "folded.json"
    assert main(["convert", str(path), str(target)]) == 0
    graph = kl.Graph.load(target)
    assert "AddV2" not in {node.op for node in graph.nodes}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with kl.Session(graph) as session:
        (y,) = session.run(["y"], {"x": x})
    np.testing.assert_array_equal(y, x.reshape(3, 2))
    nodes = len(graph.nodes)
    assert f"{nodes} nodes written" in capsys.readouterr().out


def test_convert_lists_every_unsupported_op(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proto = model(
        [
            helper.make_node("StringNormalizer", ["x"], ["d"], name="a"),
            helper.make_node("RegexFullMatch", ["d"], ["y"], name="b"),
        ],
        {"x": (FLOAT, [2, 2])},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        opset=20,
    )
    path = tmp_path / "bad.onnx"
    onnx.save(proto, str(path))
    assert main(["convert", str(path), str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert (
        "node 'a' (StringNormalizer, opset 20)" in err
        and "node 'b' (RegexFullMatch, opset 20)" in err
    )


def test_ops_onnx_lists_the_converted_ops(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "--onnx", "--json"]) == 0
    listing = {row["op"]: row["since_versions"] for row in json.loads(capsys.readouterr().out)}
    assert 13 in listing["Squeeze"] and 11 in listing["Squeeze"]
    assert {"Conv", "Resize", "Attention", "BatchNormalization"} <= set(listing)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{model}", "{tmp}/nowhere/g.json"], "GRAPH.json {tmp}/nowhere/g.json: directory"),
        (["{model}", "{tmp}"], "GRAPH.json {tmp}: is a directory; give a file name"),
        (["{model}", "-o", "{tmp}"], "-o {tmp}: is a directory; give a file name"),
        (["{model}", "{tmp}/a.json", "-o", "{tmp}/b.json"], "give the graph file once"),
        (["{model}"], "where to write the graph: kernloom convert MODEL.onnx -o GRAPH.json"),
        (["{tmp}/missing.onnx", "{tmp}/g.json"], "missing.onnx' does not exist or is not a file"),
    ],
)
def test_convert_refuses_bad_arguments_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    """One line naming the argument at fault, exit 2, no traceback and no file written
    (a missing directory once ended in a FileError traceback)."""
    path = _model_file(tmp_path)
    before = set(tmp_path.iterdir())
    argv = [a.format(model=path, tmp=tmp_path) for a in args]
    assert main(["convert", *argv]) == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and "Traceback" not in err
    assert set(tmp_path.iterdir()) == before


def test_convert_takes_the_graph_file_as_o_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _model_file(tmp_path)
    target = tmp_path / "g.json"
    assert main(["convert", str(path), "-o", str(target)]) == 0
    assert f"written to {target}" in capsys.readouterr().out
    assert main(["convert", str(path), "-o", str(target)]) == 2
    assert "the file exists; pass --force" in capsys.readouterr().err
    assert main(["convert", str(path), "-o", str(target), "--force"]) == 0
    assert kl.Graph.load(target).node("prob").op
