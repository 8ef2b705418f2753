"""Every fix an error suggests is spelled in the terms of the interface that raised it.

The errors carry what went wrong plus a structured ``Hint``; ``str(error)`` spells its
settings as Python arguments, each ``kernloom`` subcommand as its own flags. One test per
class of error that used to give Python advice under the command line: feed conversion,
a device's memory limit (with the ``--memory-limit`` flag it needed), a graph pass name
(``kernloom optimize --disable``), ``kernloom compare``'s labels and feeds, and the
errors a node wraps (its hint survives the wrapping).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import Run
from hypothesis import given, settings
from hypothesis import strategies as st

import kernloom as kl
from kernloom.cli_flags import CLI_FLAGS, cli_spelling
from kernloom.errors import Setting

PYTHON_WORDS = ("feed_dict", "np.asarray", "SessionConfig", "DeviceOptions", "kl.constant")


def _no_python_words(text: str) -> None:
    for word in PYTHON_WORDS:
        assert word not in text, (word, text)


def _feed_graph(tmp_path: Path, dtype: kl.DType) -> Path:
    g = kl.Graph()
    with g.as_default():
        kl.ops.identity(kl.placeholder(dtype, [None], name="x"), name="y")
    path = tmp_path / "g.json"
    g.save(path)
    return path


# (placeholder dtype, fed value, what the message says went wrong, the fix's words)
FEED_CASES = [
    (kl.int32, np.array([1.5]), "value 1.5 is not a whole number", "Round the values"),
    (kl.int32, np.array([2**40]), "value 1099511627776 is out of range for int32", "within"),
    (kl.int32, np.array([True]), "value True is a bool", "Convert the bools to numbers"),
    (kl.bool_, np.array([2.0]), "is a number (float64)", "Compare the numbers with zero"),
    (kl.int32, np.array([1 + 2j]), "complex values do not convert", "Take the real part"),
    (kl.float32, np.array([1e300]), "value 1e+300 overflows float32", "Scale the values"),
    (kl.uint8, np.array([-1.0]), "value -1.0 is out of range for uint8", "within that range"),
]


@pytest.mark.parametrize(("dtype", "value", "problem", "fix"), FEED_CASES)
def test_feed_conversion_fix_in_python_and_in_flags(
    run: Run, tmp_path: Path, dtype: kl.DType, value: np.ndarray, problem: str, fix: str
) -> None:
    path = _feed_graph(tmp_path, dtype)
    with kl.Session(kl.Graph.load(path)) as sess, pytest.raises(kl.InvalidArgumentError) as info:
        sess.run("y", {"x": value})
    python = str(info.value)
    assert problem in python and fix in python
    assert f"feed_dict={{'x': np.asarray(values, dtype={dtype.name!r})}}" in python
    assert info.value.hint is not None and problem in info.value.message
    assert "feed_dict" not in info.value.message  # what went wrong carries no spelling

    feed = tmp_path / "x.npy"
    np.save(feed, value)
    code, _, err = run("run", path, "--feed", f"x={feed}", "--fetch", "y")
    assert code == 2
    assert err.startswith(f"error: --feed x={feed}: feed for 'x:0'")
    assert problem in err and fix in err
    assert f"--feed x=FILE.npy (FILE.npy: an array of {dtype.name}," in err
    _no_python_words(err)


def test_feed_conversion_fix_under_kernloom_compare(run: Run, tmp_path: Path) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.int32, [None], name="x")
        kl.ops.identity(kl.ops.mat_mul(kl.ops.reshape(x, [1, -1]), kl.ops.reshape(x, [-1, 1])))
    path = tmp_path / "g.json"
    g.save(path)
    feed = tmp_path / "x.npy"
    np.save(feed, np.array([0.5]))
    code, _, err = run("compare", path, "--label", "MatMul=einsum", "--feed", f"x={feed}")
    assert code == 2 and "value 0.5 is not a whole number" in err
    assert "--feed x=FILE.npy (FILE.npy: an array of int32" in err
    _no_python_words(err)


def test_a_constant_that_does_not_fit_names_kl_constant() -> None:
    with kl.Graph().as_default(), pytest.raises(kl.InvalidArgumentError) as info:
        kl.constant(2**40, kl.int32)
    assert "value 1099511627776 is out of range for int32" in str(info.value)
    assert "kl.constant(np.asarray(values, dtype='int32'))" in str(info.value)


# -- a device's memory limit ---------------------------------------------------------------------


def _square_graph(tmp_path: Path) -> Path:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None], name="x")
        kl.ops.mul(x, x, name="sq")
    path = tmp_path / "g.json"
    g.save(path)
    return path


def test_out_of_memory_names_node_device_bytes_and_the_limit_setting(
    run: Run, tmp_path: Path
) -> None:
    path = _square_graph(tmp_path)
    value = np.ones(10_000, np.float32)  # the product needs 40000 bytes
    config = kl.SessionConfig(memory_limit={"CPU": 1000})
    with (
        kl.Session(kl.Graph.load(path), config) as sess,
        pytest.raises(kl.ResourceExhaustedError) as info,
    ):
        sess.run("sq", {"x": value})
    python = str(info.value)
    assert "node 'sq' (op Mul)" in python and "device:CPU:0" in python
    assert "allocating 40000 bytes" in python and "of 1000 bytes in use" in python
    assert python.endswith(
        "Raise the device's memory limit (SessionConfig(memory_limit={'CPU': BYTES})) or use "
        "smaller tensors."
    )
    with kl.Session(kl.Graph.load(path), kl.SessionConfig(memory_limit={"CPU": 10**6})) as sess:
        np.testing.assert_array_equal(sess.run("sq", {"x": value}), value)

    feed = tmp_path / "x.npy"
    np.save(feed, value)
    code, _, err = run(
        "run", path, "--feed", f"x={feed}", "--fetch", "sq", "--memory-limit", "CPU=1000"
    )
    assert code == 2 and err.startswith("error: node 'sq' (op Mul)")
    assert "device:CPU:0" in err and "allocating 40000 bytes" in err
    assert err.strip().endswith(
        "Raise the device's memory limit (--memory-limit CPU=BYTES) or use smaller tensors."
    )
    _no_python_words(err)
    code, out, _ = run(
        "run", path, "--feed", f"x={feed}", "--fetch", "sq", "--memory-limit", "CPU=1M"
    )
    assert code == 0 and "sq (float32, shape [10000])" in out


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        (["CPX=1M"], "--memory-limit CPX=1M: no device type 'CPX'; types: "),
        (["CPU=lots"], "--memory-limit CPU=lots: 'lots' is not a size"),
        (["CPU=1M", "CPU=2M"], "--memory-limit CPU=1M and --memory-limit CPU=2M contradict"),
        (["CPU"], "--memory-limit 'CPU': expected NAME=VALUE"),
    ],
)
def test_bad_memory_limit_flags(run: Run, tmp_path: Path, given: list[str], problem: str) -> None:
    path = _square_graph(tmp_path)
    argv: list[str | Path] = ["run", path, "--fetch", "sq"]
    for text in given:
        argv += ["--memory-limit", text]
    code, _, err = run(*argv)
    assert code == 2 and err.startswith(f"error: {problem}")


def test_a_trace_that_was_not_collected_names_the_setting() -> None:
    g = kl.Graph()
    with g.as_default():
        kl.constant(np.float32(1.0), name="c")
    with kl.Session(g) as sess:
        metadata = kl.RunMetadata()
        sess.run("c", run_metadata=metadata)
    with pytest.raises(kl.InvalidArgumentError) as info:
        metadata.chrome_trace()
    assert str(info.value) == (
        "the run collected no step stats. Ask for them with RunOptions(trace=True)."
    )


# -- graph passes and kernel labels under the other subcommands ---------------------------------


def test_unknown_graph_pass(run: Run, tmp_path: Path) -> None:
    path = _square_graph(tmp_path)
    with pytest.raises(kl.InvalidArgumentError) as info:
        kl.Session(kl.Graph.load(path), kl.SessionConfig(disabled_passes=("cse2",)))
    assert "no graph pass is named 'cse2'" in str(info.value)
    assert "Did you mean 'cse'?" in str(info.value)
    assert str(info.value).endswith("(asked for by SessionConfig(disabled_passes=('cse2',)))")
    code, _, err = run("optimize", path, "-o", tmp_path / "o.json", "--disable", "cse2")
    assert code == 2 and "no graph pass is named 'cse2'" in err
    assert err.strip().endswith("(asked for by --disable cse2)")
    _no_python_words(err)


def test_unknown_label_under_kernloom_compare(run: Run, tmp_path: Path) -> None:
    path = _square_graph(tmp_path)
    code, _, err = run("compare", path, "--label", "Mul=fastest")
    assert code == 2 and "op Mul has no kernel labelled 'fastest'" in err
    assert err.strip().endswith("(asked for by --label Mul=fastest)")
    _no_python_words(err)


def test_onnx_inference_session_names_input_feed() -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import kernloom.onnx as ko

    graph = helper.make_graph(
        [helper.make_node("Neg", ["input:0"], ["y"])],
        "g",
        [helper.make_tensor_value_info("input:0", TensorProto.INT32, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ko.InferenceSession(proto.SerializeToString())
    with pytest.raises(kl.InvalidArgumentError) as info:
        session.run(None, {"input:0": np.array([0.5, 1.0])})
    message = str(info.value)
    assert "value 0.5 is not a whole number" in message
    assert "input_feed={'input:0': np.asarray(values, dtype='int32')}" in message
    assert "feed_dict" not in message


def test_an_uninitialised_variable_names_the_initializer_and_the_init_flag(
    run: Run, tmp_path: Path
) -> None:
    g = kl.Graph()
    with g.as_default():
        w = kl.Variable(np.array([1.0, 2.0], np.float32), name="w")
        kl.ops.identity(w.value(), name="y")
        kl.variables_initializer(name="init")
    with kl.Session(g) as sess, pytest.raises(kl.KernelError) as info:
        sess.run("y")
    assert str(info.value).endswith(
        "variable 'w' was never initialised in this session. Run its initializer first: "
        "session.run(v.initializer) for the kl.Variable 'w', or "
        "session.run(kl.variables_initializer())."
    )
    path = tmp_path / "g.json"
    g.save(path)
    code, _, err = run("run", path, "--fetch", "y")
    assert code == 1 and "variable 'w' was never initialised" in err
    assert "Run its initializer first: --init NODE (the node that initialises 'w'" in err
    assert "session.run" not in err
    for init in ("init", "w/Assign"):
        code, out, _ = run("run", path, "--fetch", "y", "--init", init)
        assert code == 0 and "[1. 2.]" in out
    code, _, err = run("run", path, "--fetch", "y", "--init", "inti")
    assert code == 2 and "target 'inti' is not a node of the graph" in err


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(CLI_FLAGS)),
    st.text(min_size=1, max_size=12),
    st.text(min_size=1, max_size=12),
)
def test_a_flag_spelled_with_user_text_parses_back_in_a_shell(
    name: str, key: str, value: str
) -> None:
    """Whatever names the user gave (braces, quotes, spaces), the flag an error suggests is
    one shell word for the flag and one for its argument, holding those names as given."""
    spelled = cli_spelling(Setting(name, key=key, value=value))
    template = CLI_FLAGS[name]
    flag, _, rest = template.partition(" ")
    argument, _, trailing = rest.partition(" ")
    head = spelled
    if trailing:  # words about the flag, after it: not shell input
        about = trailing.format(key=key, value=value)
        assert spelled.endswith(" " + about)
        head = spelled[: -len(about) - 1]
    expected = [flag, argument.format(key=key, value=value)] if argument else [flag]
    assert shlex.split(head) == expected
