"""benchmarks/suite.py: the README's performance table is the suite's JSON rendered, a quick
run measures and checks every runtime .venv has, and the table shows what is missing."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
X = "\u00d7"  # the multiplication sign the table writes after a ratio
VENV_RUNTIMES = ("numpy", "onnxruntime", "torch", "kernloom_off", "kernloom_on")
"""What `make .venv/.test-installed` provides; TensorFlow lives in .venv-tf (make test-tf)."""


def _load(name: str) -> ModuleType:
    """A benchmark module under its own name (suite.py imports its siblings by name)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


suite_table = _load("suite_table")
_load("isolation")
suite = _load("suite")


def test_the_readme_table_is_the_committed_json_rendered() -> None:
    data = json.loads((BENCHMARKS / "results" / "suite.json").read_text())
    readme = (ROOT / "README.md").read_text()
    assert readme.count(suite_table.BEGIN) == 1 and readme.count(suite_table.END) == 1
    assert suite_table.between_markers(readme) == suite_table.render(data), (
        "README.md's performance table is not benchmarks/results/suite.json rendered: run "
        "`.venv/bin/python benchmarks/suite.py --render --write-readme` (or `make bench-suite`)"
    )
    assert not data["quick"], "the committed JSON is a --quick smoke run: run the full suite"
    assert [w["key"] for w in data["workloads"]] == list(suite.WORKLOAD_KEYS)


def test_a_quick_chain_run_checks_and_times_every_runtime_in_the_venv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "suite.json"
    argv = ["--quick", "--workloads", "chain_vector", "--runtimes", ",".join(VENV_RUNTIMES)]
    assert suite.main([*argv, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["quick"] and data["rounds"] == suite.QUICK_ROUNDS
    assert data["machine"]["cores"] >= 1 and data["machine"]["python"]
    (workload,) = data["workloads"]
    assert workload["key"] == "chain_vector" and workload["unit"] == "µs per original node"
    runtimes = workload["runtimes"]
    assert set(runtimes) == {*VENV_RUNTIMES, "tf"}
    assert runtimes["tf"] == {"status": "not selected"}
    for name in VENV_RUNTIMES:
        result = runtimes[name]
        assert result["status"] == "ok", name
        assert result["info"]["check"].startswith("allclose to numpy direct"), name
        assert len(result["rounds"]) == suite.QUICK_ROUNDS
        assert min(result["rounds"]) == result["best"] > 0
        assert min(result["rounds"]) <= result["median"] <= max(result["rounds"])
    assert runtimes["numpy"]["ratio"] == 1.0
    assert runtimes["kernloom_on"]["info"]["optimizer"] is True
    assert runtimes["kernloom_off"]["info"]["optimizer"] is False
    for library in ("numpy", "onnxruntime", "torch", "kernloom"):
        assert data["versions"][library], library
    # What was printed is the table of that JSON, TF's column marked as left out.
    printed = capsys.readouterr().out
    assert printed.strip() == suite_table.render(data)
    (row,) = [line for line in printed.splitlines() if line.startswith("| chain")]
    assert row.split(" | ")[3] == "not run"


def _result(median: float, ratio: float, rounds: list[float] | None = None) -> dict[str, Any]:
    return {"status": "ok", "median": median, "ratio": ratio, "rounds": rounds or []}


def test_the_table_shows_ratios_times_and_missing_runtimes() -> None:
    data = {
        "date": "2026-01-02 03:04 UTC",
        "command": "python benchmarks/suite.py",
        "quick": False,
        "rounds": 31,
        "machine": {"cpu": "Some CPU", "cores": 2, "python": "3.11.7", "load_average": [0.5]},
        "versions": {"numpy": "2.4.6", "onnxruntime": "1.32.0", "torch": "2.13.0"},
        "workloads": [
            {
                "key": "chain",
                "title": "chain",
                "unit": "µs per original node",
                "unit_short": "µs",
                "runtimes": {
                    "numpy": _result(0.31, 1.0),
                    "onnxruntime": _result(0.2354, 0.7593, [0.2, 0.25, 0.3, 0.2]),
                    "tf": {"status": "not installed", "reason": "no tensorflow"},
                    "torch": {"status": "not selected"},
                    "kernloom_off": _result(0.75, 2.4193),
                    "kernloom_on": _result(0.008532, 0.02752, [0.01, 0.5, 0.006, 0.2]),
                },
            },
            {
                "key": "loop",
                "title": "loop",
                "unit": "µs per iteration",
                "unit_short": "µs",
                "runtimes": {
                    "numpy": _result(1.2, 1.0),
                    "tf": {"status": "not installed", "reason": "no tensorflow"},
                    "kernloom_on": _result(1234.4, 1028.7),
                },
            },
        ],
    }
    lines = suite_table.render(data).splitlines()
    assert lines[0] == "Measured on 2026-01-02 03:04 UTC with `python benchmarks/suite.py`."
    assert (
        "numpy 2.4.6, ONNX Runtime 1.32.0, torch 2.13.0 (TensorFlow, kernloom: not " in (lines[1])
    )
    assert "31 rounds" in lines[2]
    header = lines[4].split(" | ")
    assert header[1:] == [
        "numpy direct",
        "ONNX Runtime",
        "TF1 Session",
        "torch eager",
        "kernloom, optimizer off",
        "kernloom, optimizer on |",
    ]
    assert lines[6] == (
        f"| chain (µs per original node) | 1.00{X} (0.310 µs) | 0.759{X} (0.235 µs) "
        f"| not installed | not run | 2.42{X} (0.750 µs) | 0.0275{X} (0.00853 µs) |"
    )
    assert lines[7] == (
        f"| loop (µs per iteration) | 1.00{X} (1.20 µs) | — | not installed | — | — "
        f"| 1029{X} (1234 µs) |"
    )
    # per round: 0.05, 2.0, 0.02, 1.0 -> sorted median 1.00, quartiles 0.0500 and 2.00
    assert lines[9] == (
        "kernloom (optimizer on) / ONNX Runtime, per round, median [middle half] and rounds "
        "kernloom was faster: chain 1.00 [0.0500-2.00] (2/4)."
    )


def test_the_readme_block_is_replaced_between_the_markers_only() -> None:
    text = f"# Title\n\nbefore\n{suite_table.BEGIN}\nold table\n{suite_table.END}\nafter\n"
    new = suite_table.with_block(text, "new table")
    assert new == f"# Title\n\nbefore\n{suite_table.BEGIN}\nnew table\n{suite_table.END}\nafter\n"
    assert suite_table.between_markers(new) == "new table"
    with pytest.raises(ValueError, match="the README has no <!-- suite:begin -->"):
        suite_table.with_block("# no markers\n", "table")


def test_bad_arguments_name_the_flag_and_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        suite.parse_args(["--workloads", "chain_vector,resnet"])
    assert "unknown workload resnet; choose from chain_vector" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--runtimes must include numpy"):
        suite.main(["--runtimes", "torch", "--json", str(tmp_path / "x.json")])
    with pytest.raises(SystemExit, match=r"--render reads .*missing\.json, which does not"):
        suite.main(["--render", "--json", str(tmp_path / "missing.json")])
    with pytest.raises(SystemExit, match="--write-readme takes a full run's numbers"):
        suite.main(["--quick", "--write-readme", "--json", str(tmp_path / "x.json")])
