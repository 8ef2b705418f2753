"""The examples under examples/ run and check themselves against numpy."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_power_iteration_finds_the_dominant_eigenvalue(capsys: pytest.CaptureFixture[str]) -> None:
    assert load("power_iteration").main(["--size", "24"]) == 0
    assert "OK" in capsys.readouterr().out


def test_training_loop_matches_numpy_and_converges(capsys: pytest.CaptureFixture[str]) -> None:
    assert load("train_linear_regression").main(["--runs", "10", "--steps-per-run", "40"]) == 0
    assert "OK" in capsys.readouterr().out
