"""TensorFlow 1 graphs as TF1 code writes them, imported and run against TensorFlow's values.

The fixtures under ``tests/fixtures/tf_graphs_edge`` were written by TensorFlow 2.21
(``make_fixtures.py``: ``tf.compat.v1`` graph mode, control flow v1, grappler off): while
loops (several loop variables, nested, ``maximum_iterations``, a ``tf.cond`` in the body, a
growing tensor), nested ``tf.cond``, resource variables with their initializers and
control dependencies, ``placeholder_with_default``, ``identity_n``, ``stop_gradient``,
``Assert``, constants of every dtype (empty, scalar, limits, NaN), ``Shape``/``Size``/
``Rank`` of partial shapes, gathers with ``batch_dims``, ``Split``/``Unpack`` outputs
fetched as ``name:1``, NCHW. Each ``.npz`` holds the steps one session ran and what
TensorFlow gave (or that it failed); every graph runs here with the graph optimizer on
and off. Graphs kernloom cannot run (ref variables, ops it lacks, function libraries,
string constants) must be refused with an error that names the file, the nodes and what to
do. No test runs TensorFlow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kernloom as kl
from kernloom.cli import main
from kernloom.tf import import_graph_def
from kernloom.tf.schema import message_class

FIXTURES = Path(__file__).parent / "fixtures" / "tf_graphs_edge"

Step = tuple[list[str], dict[str, np.ndarray], list[str], dict[str, np.ndarray], str | None]
"""targets, feeds, fetches, TensorFlow's values, TensorFlow's error class (or None)."""


def _steps(name: str) -> list[Step]:
    steps: list[Step] = []
    with np.load(FIXTURES / f"{name}.npz") as archive:
        while f"{len(steps)}/targets" in archive.files:
            pre = f"{len(steps)}/"
            feeds = {
                k.removeprefix(pre + "feed/"): archive[k]
                for k in archive.files
                if k.startswith(pre + "feed/")
            }
            values = {
                k.removeprefix(pre + "fetch/"): archive[k]
                for k in archive.files
                if k.startswith(pre + "fetch/")
            }
            error = str(archive[pre + "error"]) if pre + "error" in archive.files else None
            targets = [str(t) for t in archive[pre + "targets"]]
            fetches = [str(f) for f in archive[pre + "fetches"]]
            steps.append((targets, feeds, fetches, values, error))
    return steps


def _assert_tf_values(got: list[Any], fetches: list[str], want: dict[str, np.ndarray]) -> None:
    for fetch, value in zip(fetches, got, strict=True):
        expected = want[fetch]
        value = np.asarray(value)
        assert value.dtype == expected.dtype, fetch
        assert value.shape == expected.shape, fetch
        if expected.dtype.kind in "fc":
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=fetch)
        else:
            np.testing.assert_array_equal(value, expected, err_msg=fetch)


def _run_step(session: kl.Session, step: Step) -> None:
    targets, feeds, fetches, values, error = step
    if error is not None:
        # TensorFlow failed this step (an Assert, a gather out of range, an uninitialised
        # variable, a branch not taken fetched): kernloom must fail it too.
        with pytest.raises(kl.KernloomError):
            session.run(fetches, feed_dict=feeds, targets=targets)
        return
    got = session.run(fetches, feed_dict=feeds, targets=targets)
    _assert_tf_values(list(got), fetches, values)


RUNNABLE = [
    "while_multi",
    "while_nested",
    "while_with_cond",
    "conds",
    "variables_resource",
    "uninitialised",
    "misc",
    "constants",
    "shapes",
    "indexing",
    "nchw",
]


@pytest.mark.parametrize("optimizer", [True, False], ids=["optimizer", "no-optimizer"])
@pytest.mark.parametrize("name", RUNNABLE)
def test_a_tf1_graph_gives_tensorflow_s_values_step_by_step(name: str, optimizer: bool) -> None:
    graph = import_graph_def(FIXTURES / f"{name}.pb")
    config = kl.SessionConfig(graph_optimizer=optimizer)
    with kl.Session(graph, config=config) as session:
        for step in _steps(name):
            _run_step(session, step)


@pytest.mark.parametrize("step", [0, 6], ids=["fed-placeholders", "fed-square"])
def test_a_cond_over_a_fed_tensor_is_placed(step: int) -> None:
    """``tf.cond`` colocates each Switch with the tensor it switches (``loc:@q``); a fed
    tensor's node is not in the step graph, which made the placer refuse every step of a
    cond over a placeholder ("must be colocated with 'q', which is not in the graph"), and
    of one over a fed Square ('y'). TensorFlow's placer ignores such a constraint; so does
    the step graph now (``subgraph._in_step``), for any node colocated with a fed one."""
    graph = import_graph_def(FIXTURES / "conds.pb")
    assert graph.node("outer/inner/Switch/Switch").colocation_names == ["q"]
    assert graph.node("of_y/add/Switch").colocation_names == ["y"]
    _, feeds, fetches, values, _ = _steps("conds")[step]
    if step == 6:
        assert "y:0" in feeds
    with kl.Session(graph) as session:
        _assert_tf_values(list(session.run(fetches, feed_dict=feeds)), fetches, values)


def test_imported_loops_keep_their_loop_shapes() -> None:
    graph = import_graph_def(FIXTURES / "while_with_cond.pb")
    assert graph.tensor("rows:0").shape.dims == (None, 2)
    assert graph.tensor("steps:0").shape.dims == ()
    graph = import_graph_def(FIXTURES / "shapes.pb")
    assert graph.tensor("x:0").shape.dims == (None, 3)
    assert graph.tensor("flat:0").shape.dims == (None,)


# -- what kernloom refuses, and how it says so ------------------------------------------------


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        (
            "variables_ref",
            [
                "VariableV2 (nodes 'w', 'c', 'o', 'k', 'v')",
                "AssignAdd (node 'add')",
                "the ops of TensorFlow 1 ref variables",
                "use_resource=True",
            ],
        ),
        ("unknown_ops", ["1 op(s)", "Lgamma (nodes 'lg', 'lg2')"]),  # (Cumprod is known now)
        (
            "function_call",
            [
                "function library (1 function(s))",
                "called by node 'PartitionedCall' (op PartitionedCall)",
                "convert_variables_to_constants_v2",
            ],
        ),
        (
            "while_v2",
            [
                "function library (2 function(s))",
                "called by node 'w2' (op StatelessWhile)",
                "tf.compat.v1.disable_control_flow_v2()",
            ],
        ),
        (
            "asserts",
            [
                "12 string constant(s) ('pos/assert_less/Assert/Const'",
                "no string dtype (DT_STRING)",
                "(Assert 'lt/Assert/AssertGuard/Assert', 'pos/assert_less/Assert/AssertGuard/",
                "export the graph without the assertions",
            ],
        ),
    ],
)
def test_a_graph_kernloom_cannot_run_is_refused_naming_nodes_and_a_remedy(
    name: str, parts: list[str]
) -> None:
    path = FIXTURES / f"{name}.pb"
    with pytest.raises(kl.InvalidArgumentError) as info:
        import_graph_def(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    for part in parts:
        assert part in message
    assert "Did you mean 'Sign'" not in message  # Assign is not a misspelt Sign


def _edited(name: str, edit: str) -> bytes:
    graph_def = message_class("GraphDef")()
    graph_def.ParseFromString((FIXTURES / f"{name}.pb").read_bytes())
    node = next(n for n in graph_def.node if n.name == "w/mul")
    if edit == "missing input":
        node.input[0] = "w/nope"
    elif edit == "int for a type":
        node.attr["T"].Clear()
        node.attr["T"].i = 1
    elif edit == "type for a string":
        enter = next(n for n in graph_def.node if n.op == "Enter")
        enter.attr["frame_name"].Clear()
        enter.attr["frame_name"].type = 1
    elif edit == "list for an int":
        enter = next(n for n in graph_def.node if n.op == "Enter")
        enter.attr["parallel_iterations"].Clear()
        enter.attr["parallel_iterations"].list.i.extend([1, 2])
    return bytes(graph_def.SerializeToString())


@pytest.mark.parametrize(
    ("edit", "parts"),
    [
        ("missing input", ["node 'w/mul': input 'w/nope' refers to no node in the graph"]),
        (
            "int for a type",
            [
                "node 'w/mul': (op Mul) attr 'T' holds a value of type int",
                "declares it type",
                "AttrValue type: ...",
            ],
        ),
        (
            "type for a string",
            ["node 'w/Enter': (op Enter) attr 'frame_name' holds a value of type type"],
        ),
        (
            "list for an int",
            [
                "node 'w/Enter': (op Enter) attr 'parallel_iterations' holds a value of type "
                "list(int)",
                "declares it int",
            ],
        ),
    ],
)
def test_a_malformed_node_names_the_node_and_what_to_write(edit: str, parts: list[str]) -> None:
    with pytest.raises(kl.InvalidArgumentError) as info:
        import_graph_def(_edited("while_multi", edit))
    message = str(info.value)
    assert message.startswith("<bytes>: ")
    for part in parts:
        assert part in message


@pytest.mark.parametrize("keep", [1, 7, 0.5, -3])
def test_a_truncated_file_names_the_file_and_says_how_to_write_it(
    keep: float, tmp_path: Path
) -> None:
    data = (FIXTURES / "while_multi.pb").read_bytes()
    cut = tmp_path / "cut.pb"
    cut.write_bytes(data[: int(keep * len(data)) if isinstance(keep, float) else keep])
    with pytest.raises(kl.InvalidArgumentError) as info:
        import_graph_def(cut)
    message = str(info.value)
    assert message.startswith(f"{cut}: not a binary GraphDef")
    assert "truncated or corrupt" in message
    assert "tf.io.write_graph(" in message


# -- the command line ------------------------------------------------------------------------


def _member(archive: Any, fetch: str) -> np.ndarray:
    """The value of ``fetch`` in ``kernloom run``'s npz (``x:0`` as ``x``, ``x:1`` as
    ``x_1``)."""
    for key in (fetch, fetch.removesuffix(":0"), fetch.replace(":", "_")):
        if key in archive.files:
            return np.asarray(archive[key])
    raise KeyError(fetch)


def _save_feeds(tmp_path: Path, feeds: dict[str, np.ndarray]) -> list[str]:
    args = []
    for name, value in feeds.items():
        base = name.removesuffix(":0")
        np.save(tmp_path / f"{base}.npy", value)
        args += ["--feed", f"{base}={tmp_path / f'{base}.npy'}"]
    return args


@pytest.mark.parametrize(("name", "index"), [("while_multi", 2), ("conds", 1), ("indexing", 7)])
@pytest.mark.parametrize("optimizer", [[], ["--no-optimizer"]], ids=["optimizer", "no-optimizer"])
def test_kernloom_run_gives_tensorflow_s_values(
    name: str, index: int, optimizer: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, feeds, fetches, values, error = _steps(name)[index]
    assert error is None
    out = tmp_path / "out.npz"
    args = ["run", str(FIXTURES / f"{name}.pb"), *_save_feeds(tmp_path, feeds), *optimizer]
    for fetch in fetches:
        args += ["--fetch", fetch]
    assert main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
    with np.load(out) as archive:
        assert len(archive.files) == len(fetches)
        got = [_member(archive, f) for f in fetches]
    _assert_tf_values(got, fetches, values)


def test_kernloom_run_initialises_variables_with_init(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init, first = _steps("variables_resource")[:2]
    out = tmp_path / "out.npz"
    args = ["run", str(FIXTURES / "variables_resource.pb"), "--init", init[0][0]]
    args += [x for f in first[2] for x in ("--fetch", f)]
    assert main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
    with np.load(out) as archive:
        got = [_member(archive, f) for f in first[2]]
    _assert_tf_values(got, first[2], first[3])


@pytest.mark.parametrize(
    ("args", "code", "parts"),
    [
        (["variables_ref.pb", "--fetch", "after_add"], 2, ["VariableV2", "use_resource=True"]),
        (["function_call.pb", "--fetch", "y"], 2, ["(op PartitionedCall)"]),
        (["misc.pb", "--feed", "f=bad", "--fetch", "guarded"], 1, ["assertion failed: [1 -2]"]),
    ],
)
def test_kernloom_run_refuses_or_fails_with_the_reason(
    args: list[str], code: int, parts: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if "f=bad" in args:
        bad = _steps("misc")[2][1]["f:0"]
        np.save(tmp_path / "bad.npy", bad)
        args = [a.replace("f=bad", f"f={tmp_path / 'bad.npy'}") for a in args]
    args = [str(FIXTURES / args[0]), *args[1:]]
    assert main(["run", *args]) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for part in parts:
        assert part in err


def test_kernloom_run_names_a_truncated_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.pb"
    data = (FIXTURES / "conds.pb").read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    assert main(["run", str(cut), "--fetch", "out"]) == 2
    err = capsys.readouterr().err
    assert f"error: {cut}: not a binary GraphDef" in err
    assert "tf.io.write_graph(" in err
