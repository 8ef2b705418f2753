"""``kernloom run`` against bad input: every case is ``error: ...`` with exit 2 (or 1 for a
run that fails), naming the file, flag or node -- never a Python traceback.

Classes, each with its cases: hostile graph files, hostile feed files, bad numbers in
flags, outputs (exact paths, --force, directories, safe .npz members), contradictory
repeated arguments, and full disks.
"""

from __future__ import annotations

import errno
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import kernloom as kl
from kernloom import cli_outputs, fileio
from kernloom.cli import main

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def invoke(*argv: str | Path) -> tuple[int, str, str]:
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse's own usage errors
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err
        return code, out, err

    return invoke


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    """y = relu(x @ w), saved; x.npy beside it."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        w = kl.constant(np.arange(6, dtype=np.float32).reshape(3, 2) - 2, name="w")
        kl.ops.relu(kl.ops.mat_mul(x, w, name="xw"), name="y")
    path = tmp_path / "graph.json"
    g.save(path)
    np.save(tmp_path / "x.npy", np.ones((4, 3), np.float32))
    return path


def _expected() -> np.ndarray:
    w = np.arange(6, dtype=np.float32).reshape(3, 2) - 2
    return np.maximum(np.ones((4, 3), np.float32) @ w, 0)


def _mutated(graph: Path, name: str, change: Callable[[dict], None]) -> Path:
    doc = json.loads(graph.read_text())
    change(doc)
    path = graph.with_name(name)
    path.write_text(json.dumps(doc))
    return path


def _placeholder_shape(dims: list) -> Callable[[dict], None]:
    def change(doc: dict) -> None:
        doc["nodes"][0]["attrs"]["shape"]["shape"] = dims

    return change


def _const_tensor(**fields: object) -> Callable[[dict], None]:
    def change(doc: dict) -> None:
        doc["nodes"][1]["attrs"]["value"]["tensor"].update(fields)

    return change


# -- hostile graph files --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_placeholder_shape([2**62, 2**62]), "node 'x': attr 'shape': shape [4611686018427387904"),
        (_placeholder_shape([True, 3]), "node 'x': attr 'shape': shape [True, 3] has dimension"),
        (_placeholder_shape([-7, 3]), "node 'x': attr 'shape': shape [-7, 3] has dimension -7"),
        (_const_tensor(dtype="resource"), "node 'w': attr 'value': a tensor in a file cannot"),
        (_const_tensor(dtype="float33"), "node 'w': attr 'value': unknown dtype name 'float33'"),
        (_const_tensor(shape=[2**40] * 3), "node 'w': attr 'value': tensor shape [1099511627776"),
    ],
    ids=["size-overflows-int64", "true-as-dim", "negative-dim", "resource", "float33", "huge"],
)
def test_hostile_graph_files_name_the_file_and_node(
    run: Run, graph: Path, change: Callable[[dict], None], message: str
) -> None:
    bad = _mutated(graph, "bad.json", change)
    code, _, err = run("run", bad, "--feed", f"x={graph.parent / 'x.npy'}", "--fetch", "y")
    assert code == 2
    assert err.startswith(f"error: {bad}: {message}"), err


def test_json_nested_thousands_deep_is_an_error(run: Run, tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"nodes": ' + "[" * 50_000 + "]" * 50_000 + "}")
    code, _, err = run("run", deep, "--fetch", "y")
    assert code == 2 and err.startswith(f"error: {deep}: JSON nested too deeply")


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda d: Path("/dev/zero"), "a character device"),
        (lambda d: d, "a directory"),
        (lambda d: (os.mkfifo(d / "fifo"), d / "fifo")[1], "a FIFO (named pipe)"),
    ],
    ids=["dev-zero", "directory", "fifo"],
)
def test_non_regular_graph_files_are_refused_without_reading_them(
    run: Run, tmp_path: Path, make: Callable[[Path], Path], kind: str
) -> None:
    path = make(tmp_path)
    code, _, err = run("run", path, "--fetch", "y")
    assert code == 2
    assert err.strip() == f"error: {path}: cannot read the graph file: {kind}, not a regular file"


def test_files_over_the_size_limit_are_refused_and_the_limit_can_be_raised(
    run: Run, graph: Path
) -> None:
    feed = f"x={graph.parent / 'x.npy'}"
    code, _, err = run("run", graph, "--feed", feed, "--fetch", "y", "--max-input-size", "100")
    size = graph.stat().st_size
    assert code == 2
    assert err.strip() == (
        f"error: {graph}: cannot read the graph file: {size} B, more than the limit of 100 B; "
        f"pass --max-input-size to allow more"
    )
    code, _, _ = run("run", graph, "--feed", feed, "--fetch", "y", "--max-input-size", "1M")
    assert code == 0


# -- hostile feed files ---------------------------------------------------------------------


def _forged_header(path: Path) -> None:
    data = (path.parent / "x.npy").read_bytes()
    path.write_bytes(data.replace(b"(4, 3)", b"(99999999999, 99999999999)"))


def _object_array(path: Path) -> None:
    np.save(path, np.array([1, "a"], dtype=object), allow_pickle=True)


def _truncated(path: Path) -> None:
    path.write_bytes((path.parent / "x.npy").read_bytes()[:-5])


def _npz(path: Path) -> None:
    with path.open("wb") as stream:
        np.savez(stream, x=np.ones((4, 3), np.float32))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_forged_header, "its header declares shape (99999999999, 99999999999) of float32"),
        (_object_array, "it holds Python objects (pickled), not numbers"),
        (_truncated, "its header declares shape (4, 3) of float32, 48 bytes, but the file holds"),
        (_npz, "an .npz archive; feed one .npy per tensor"),
        (lambda p: p.write_text("not numpy"), "not a .npy file of plain numbers"),
    ],
    ids=["forged-header", "pickled-objects", "truncated", "npz", "text"],
)
def test_hostile_feed_files_name_the_flag_and_file(
    run: Run, graph: Path, make: Callable[[Path], None], message: str
) -> None:
    feed = graph.parent / "feed.npy"
    make(feed)
    code, _, err = run("run", graph, "--feed", f"x={feed}", "--fetch", "y")
    assert code == 2
    assert err.startswith(f"error: --feed x={feed}: ") and message in err, err


@pytest.mark.parametrize("special", ["/dev/zero", "DIR", "FIFO"])
def test_non_regular_feed_files_are_refused(run: Run, graph: Path, special: str) -> None:
    path = {"DIR": graph.parent, "FIFO": graph.parent / "fifo"}.get(special, Path(special))
    if special == "FIFO":
        os.mkfifo(path)
    code, _, err = run("run", graph, "--feed", f"x={path}", "--fetch", "y")
    assert code == 2 and err.startswith(f"error: --feed x={path}: ") and "not a regular file" in err


# -- numbers in flags -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--timeout", "nan", "argument --timeout: must be a finite number of seconds > 0, got nan"),
        ("--timeout", "inf", "must be a finite number of seconds > 0, got inf"),
        ("--timeout", "-1", "must be a finite number of seconds > 0, got -1"),
        ("--inter-op-threads", "100000000000", "must be from 1 to 256, got 100000000000"),
        ("--inter-op-threads", "0", "must be from 1 to 256, got 0"),
        ("--max-input-size", "lots", "'lots' is not a size; write it as bytes or with a unit"),
        ("--device-filter", "", "argument --device-filter: must not be empty"),
    ],
)
def test_bad_numbers_are_usage_errors(
    run: Run, graph: Path, flag: str, value: str, message: str
) -> None:
    code, _, err = run("run", graph, "--fetch", "y", flag, value)
    assert code == 2 and message in err, err


def test_thread_count_at_the_cap_runs(run: Run, graph: Path) -> None:
    feed = f"x={graph.parent / 'x.npy'}"
    code, _, _ = run("run", graph, "--feed", feed, "--fetch", "y", "--inter-op-threads", "256")
    assert code == 0


# -- outputs --------------------------------------------------------------------------------


def test_out_writes_exactly_the_path_given(run: Run, graph: Path) -> None:
    out = graph.parent / "result"  # no suffix: numpy.save would have written result.npy
    feed = f"x={graph.parent / 'x.npy'}"
    code, stdout, _ = run("run", graph, "--feed", feed, "--fetch", "y", "--out", out)
    assert code == 0
    assert f"written to {out}\n" in stdout
    assert not out.with_suffix(".npy").exists()
    np.testing.assert_array_equal(np.load(out), _expected())


def test_out_refuses_to_replace_a_file_without_force(run: Run, graph: Path) -> None:
    out = graph.parent / "y.npy"
    out.write_bytes(b"precious")
    argv = ["run", graph, "--feed", f"x={graph.parent / 'x.npy'}", "--fetch", "y", "--out", out]
    code, _, err = run(*argv)
    assert code == 2
    assert err.strip() == f"error: --out {out}: the file exists; pass --force to replace it"
    assert out.read_bytes() == b"precious"
    code, _, _ = run(*argv, "--force")
    assert code == 0
    np.testing.assert_array_equal(np.load(out), _expected())


def test_trace_refuses_to_replace_a_file_without_force(run: Run, graph: Path) -> None:
    trace = graph.parent / "trace.json"
    trace.write_text("old")
    argv = ["run", graph, "--feed", f"x={graph.parent / 'x.npy'}", "--fetch", "y"]
    code, _, err = run(*argv, "--trace", trace)
    assert code == 2 and "--trace" in err and "pass --force" in err and trace.read_text() == "old"
    code, _, _ = run(*argv, "--trace", trace, "--force")
    assert code == 0 and "traceEvents" in json.loads(trace.read_text())


def test_out_and_trace_refuse_directories_and_missing_directories(run: Run, graph: Path) -> None:
    feed = f"x={graph.parent / 'x.npy'}"
    code, _, err = run("run", graph, "--feed", feed, "--fetch", "y", "--out", graph.parent)
    assert code == 2
    assert f"--out {graph.parent}: is a directory; give a file name" in err
    assert not graph.parent.with_suffix(".npy").exists()
    code, _, err = run("run", graph, "--feed", feed, "--fetch", "y", "--trace", graph.parent)
    assert code == 2 and "is a directory" in err
    missing = graph.parent / "no" / "y.npy"
    code, _, err = run("run", graph, "--feed", feed, "--fetch", "y", "--out", missing)
    assert code == 2 and f"directory {missing.parent} does not exist" in err
    blocker = graph.parent / "plain"  # a file where the output's folder should be
    blocker.write_text("not a folder")
    for flag in ("--out", "--trace"):
        code, _, err = run("run", graph, "--feed", feed, "--fetch", "y", flag, blocker / "y.npy")
        assert (
            code == 2 and f"{flag} {blocker / 'y.npy'}: {blocker} is a file, not a directory" in err
        )
    assert blocker.read_text() == "not a folder"


def test_an_unwritable_directory_is_refused_before_the_run(
    run: Run, graph: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = graph.parent / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(  # as for a user without write permission (root may write anywhere)
        cli_outputs.os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode)
    )
    feed = f"x={graph.parent / 'x.npy'}"
    code, out, err = run("run", graph, "--feed", feed, "--fetch", "y", "--out", locked / "y.npy")
    assert code == 2 and out == ""
    assert err.strip() == (
        f"error: --out {locked / 'y.npy'}: cannot create files in {locked}: permission denied"
    )


def test_a_full_disk_while_writing_an_output_is_a_clean_error(
    run: Run, graph: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = graph.parent / "y.npy"
    out.write_bytes(b"previous result")

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio.os, "fsync", full)
    feed = f"x={graph.parent / 'x.npy'}"
    code, _, err = run("run", graph, "--feed", feed, "--fetch", "y", "--out", out, "--force")
    assert code == 2
    assert err.strip() == f"error: {out}: no space left on device"
    assert out.read_bytes() == b"previous result"
    assert [p.name for p in graph.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_fetch_names_become_safe_npz_members(run: Run, tmp_path: Path) -> None:
    doc = {
        "nodes": [
            {"name": "a/../../x", "op": "Const", "attrs": {
                "dtype": {"type": "int32"},
                "value": {"tensor": {"dtype": "int32", "shape": [], "data": "BwAAAA=="}},
            }},
            {"name": "allow_pickle", "op": "Identity", "inputs": ["a/../../x"],
             "attrs": {"T": {"type": "int32"}}},
            {"name": "..", "op": "Identity", "inputs": ["a/../../x"],
             "attrs": {"T": {"type": "int32"}}},
        ]
    }  # fmt: skip
    graph = tmp_path / "names.json"
    graph.write_text(json.dumps(doc))
    out = tmp_path / "all.npz"
    fetches = ["a/../../x", "allow_pickle", "..", "..:0"]
    code, stdout, _ = run("run", graph, *(f"--fetch={f}" for f in fetches), "--out", out)
    assert code == 0, stdout
    with zipfile.ZipFile(out) as archive:
        assert sorted(archive.namelist()) == ["__.npy", "a_.._.._x.npy", "allow_pickle.npy"]
    with np.load(out) as values:
        assert {k: int(values[k]) for k in values} == {"a_.._.._x": 7, "allow_pickle": 7, "__": 7}
    assert "members renamed: a/../../x as 'a_.._.._x', .. as '__'" in stdout


def test_two_fetches_that_would_share_a_member_are_an_error(run: Run, graph: Path) -> None:
    doc = json.loads(graph.read_text())
    doc["nodes"].append(
        {"name": "x_1", "op": "Identity", "inputs": ["x:0"], "attrs": {"T": {"type": "float32"}}}
    )
    graph.write_text(json.dumps(doc))
    feed = f"x={graph.parent / 'x.npy'}"
    out = graph.parent / "all.npz"
    fetches = ["--fetch", "x:1", "--fetch", "x_1"]
    code, _, err = run("run", graph, "--feed", feed, *fetches, "--out", out)
    assert code == 2
    assert "fetches 'x:1' and 'x_1' would both be member 'x_1'" in err


# -- contradictory repeated arguments -------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--feed", "x=X", "--feed", "x=OTHER"],
            "--feed x=X and --feed x=OTHER contradict each other; give x once",
        ),
        (
            ["--feed", "x=X", "--feed", "x:0=OTHER"],
            "--feed x=X and --feed x:0=OTHER contradict each other",
        ),
        (
            ["--feed", "x=X", "--label", "MatMul=einsum", "--label", "MatMul=blocked"],
            "--label MatMul=einsum and --label MatMul=blocked contradict each other",
        ),
        (
            ["--feed", "x=X", "--fetch", "xw", "--out", "o.npy", "--out", "./o.npy"],
            "--out for fetch 'y' and --out for fetch 'xw' are both",
        ),
        (
            ["--feed", "x=X", "--out", "t.json", "--trace", "t.json"],
            "--trace and --out for fetch 'y' are both",
        ),
        (["--timeout", "1", "--timeout", "2"], "--timeout given twice with different values"),
        (["--trace", "a.json", "--trace", "b.json"], "--trace given twice with different values"),
    ],
)
def test_contradictory_repeated_arguments_are_errors(
    run: Run, graph: Path, extra: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(graph.parent)
    np.save(graph.parent / "other.npy", np.zeros((4, 3), np.float32))
    argv = [a.replace("=X", "=x.npy").replace("=OTHER", "=other.npy") for a in extra]
    message = message.replace("=X", "=x.npy").replace("=OTHER", "=other.npy")
    code, _, err = run("run", graph, "--fetch", "y", *argv)
    assert code == 2
    assert message in err, err


def test_repeating_an_argument_with_the_same_value_is_fine(run: Run, graph: Path) -> None:
    feed = f"x={graph.parent / 'x.npy'}"
    code, out, _ = run(
        "run", graph, "--feed", feed, "--feed", feed, "--fetch", "y",
        "--label", "MatMul=einsum", "--label", "MatMul=einsum", "--timeout", "5", "--timeout", "5",
    )  # fmt: skip
    assert code == 0 and "y (float32, shape [4, 2])" in out


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.ones((2, 4), np.float32), "has shape [2, 4], which does not fit (?, 3)"),
        (np.array([["a", "b", "c"]]), "value 'a' (str) cannot be converted to float32"),
    ],
)
def test_a_feed_that_does_not_fit_names_its_file(
    run: Run, graph: Path, value: np.ndarray, message: str
) -> None:
    feed = graph.parent / "bad.npy"
    np.save(feed, value)
    code, _, err = run("run", graph, "--feed", f"x={feed}", "--fetch", "y")
    assert code == 2
    assert err.startswith(f"error: --feed x={feed}: feed for 'x:0'") and message in err, err
