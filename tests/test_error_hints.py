"""Errors say how to fix them in the caller's own terms.

An error carries what went wrong and a ``Hint`` naming the setting at fault; the Python
API renders the setting as Python (``feed_dict={'x': value}``), ``kernloom run`` as its
flag (``--feed x=FILE.npy``). One test per error kind that names a setting, through both
interfaces, and checks that the one mapping from setting to flag is complete.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import Run

import kernloom as kl
from kernloom.cli import _parser
from kernloom.cli_flags import (
    CLI_FLAGS,
    COMPARE_FLAGS,
    OPTIMIZE_FLAGS,
    PYTHON_ONLY,
    cli_message,
    cli_spelling,
)
from kernloom.errors import PYTHON_SPELLINGS, Hint, InvalidArgumentError, Setting


def _save(tmp_path: Path, build: Callable[[], object]) -> Path:
    g = kl.Graph()
    with g.as_default():
        build()
    path = tmp_path / "g.json"
    g.save(path)
    return path


def _mlp() -> kl.Graph:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        kl.ops.mat_mul(x, kl.constant(np.ones((3, 2), np.float32)), name="y")
    return g


# -- the mechanism ----------------------------------------------------------------------------


def test_a_hint_renders_per_interface_and_keeps_user_text_out_of_the_template() -> None:
    error = InvalidArgumentError(
        "placeholder '{x}' must be fed.", hint=Hint("Pass {feed}.", feed=Setting("feed", "{x}"))
    )
    assert str(error) == "placeholder '{x}' must be fed. Pass feed_dict={'{x}': value}."
    assert cli_message(error) == "placeholder '{x}' must be fed. Pass --feed '{x}=FILE.npy'."
    assert error.message == "placeholder '{x}' must be fed."


def test_every_setting_has_a_python_spelling_and_a_real_flag_of_a_command() -> None:
    assert set(CLI_FLAGS) | set(OPTIMIZE_FLAGS) | PYTHON_ONLY == set(PYTHON_SPELLINGS)
    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, flags in (
        ("run", CLI_FLAGS),
        ("compare", COMPARE_FLAGS),
        ("optimize", OPTIMIZE_FLAGS),
    ):
        options = {
            option
            for action in subparsers.choices[command]._actions
            for option in action.option_strings
        }
        for name, template in flags.items():
            assert template.split()[0] in options, (command, name)
            spelled = cli_spelling(Setting(name, key="k", value="v"), flags)
            assert spelled.startswith(template.split()[0]), spelled


# -- each error kind that names a setting ---------------------------------------------------


def test_unfed_placeholder(run: Run, tmp_path: Path) -> None:
    with kl.Session(_mlp()) as sess, pytest.raises(kl.InvalidArgumentError) as info:
        sess.run("y")
    assert str(info.value).endswith("Pass feed_dict={'x': value}.")
    path = tmp_path / "g.json"
    _mlp().save(path)
    code, _, err = run("run", path, "--fetch", "y")
    assert code == 2 and err.strip().endswith("Pass --feed x=FILE.npy.")
    assert "feed_dict" not in err


def test_unknown_kernel_label(run: Run, tmp_path: Path) -> None:
    config = kl.SessionConfig(kernel_labels={"MatMul": "fast"})
    with pytest.raises(kl.InvalidArgumentError) as info:
        kl.Session(_mlp(), config)
    assert "op MatMul has no kernel labelled 'fast'" in str(info.value)
    assert str(info.value).endswith(
        "(asked for by SessionConfig(kernel_labels={'MatMul': 'fast'}))"
    )
    path = tmp_path / "g.json"
    _mlp().save(path)
    code, _, err = run("run", path, "--fetch", "y", "--label", "MatMul=fast")
    assert code == 2 and err.strip().endswith("(asked for by --label MatMul=fast)")
    assert "SessionConfig" not in err


@pytest.mark.parametrize(
    ("text", "problem"),
    [("GPU", "device filter 'GPU' matches no device"), ("/device:gpu:x", "device filter: ")],
)
def test_device_filter(run: Run, tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(kl.KernloomError) as info:
        kl.Session(_mlp(), kl.SessionConfig(device_filters=(text,)))
    assert problem in str(info.value)
    assert str(info.value).endswith(f"(from SessionConfig(device_filters=[{text!r}]))")
    path = tmp_path / "g.json"
    _mlp().save(path)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 3), np.float32))
    code, _, err = run("run", path, "--feed", f"x={x}", "--fetch", "y", "--device-filter", text)
    assert code == 2 and err.strip().endswith(f"(from --device-filter {text})")
    assert "SessionConfig" not in err


def test_unknown_op_in_kernel_labels(run: Run, tmp_path: Path) -> None:
    with pytest.raises(kl.NotFoundError) as info:
        kl.Session(_mlp(), kl.SessionConfig(kernel_labels={"MatMull": "einsum"}))
    assert "Did you mean 'MatMul'" in str(info.value)
    assert str(info.value).endswith(
        "(asked for by SessionConfig(kernel_labels={'MatMull': 'einsum'}))"
    )
    path = tmp_path / "g.json"
    _mlp().save(path)
    code, _, err = run("run", path, "--fetch", "y", "--label", "MatMull=einsum")
    assert code == 2 and err.strip().endswith("(asked for by --label MatMull=einsum)")


def _pinned() -> None:
    with kl.device("/device:GPU:0"):
        kl.constant(np.float32(2.0), name="y")


def test_soft_placement(run: Run, tmp_path: Path) -> None:
    g = kl.Graph()
    with g.as_default():
        _pinned()
    with kl.Session(g) as sess, pytest.raises(kl.InvalidArgumentError) as info:
        sess.run("y")
    assert str(info.value).endswith(
        "(SessionConfig(allow_soft_placement=True) would place it on a supported device instead)"
    )
    with kl.Session(g, kl.SessionConfig(allow_soft_placement=True)) as sess:
        assert sess.run("y") == 2.0
    path = _save(tmp_path, _pinned)
    code, _, err = run("run", path, "--fetch", "y")
    assert code == 2
    assert err.strip().endswith("(--soft-placement would place it on a supported device instead)")
    code, out, _ = run("run", path, "--fetch", "y", "--soft-placement")
    assert code == 0 and "y (float32, shape [])" in out


def _endless() -> None:
    (last,) = kl.while_loop(lambda i: i > -1, lambda i: i + 1, [kl.constant(np.int64(0))])
    kl.ops.identity(last, name="out")


def test_deadline_names_the_timeout_and_the_trace(run: Run, tmp_path: Path) -> None:
    g = kl.Graph()
    with g.as_default():
        _endless()
    fetch = "out"
    with kl.Session(g) as sess, pytest.raises(kl.DeadlineExceededError) as info:
        sess.run(fetch, options=kl.RunOptions(timeout_s=0.05))
    assert str(info.value).endswith(
        "The timeout is RunOptions(timeout_s=...); RunOptions(trace=True) shows which nodes ran."
    )
    path = _save(tmp_path, _endless)
    code, _, err = run("run", path, "--fetch", fetch, "--timeout", "0.05")
    assert code == 1
    assert err.strip().endswith(
        "The timeout is --timeout SECONDS; --trace FILE.json shows which nodes ran."
    )
    assert "RunOptions" not in err
