"""The vendor's first hour, for real: from an empty directory, ``kernloom plugin new acme
--device-type ACME``, ``pip install ./acme`` into a fresh virtual environment (beside wheels
of the core and the numpy CPU plugin), ``pytest --kernloom-device ACME`` passes, and a graph
mixing CPU and ACME nodes runs with its copies counted.

Prints the time from ``plugin new`` to a green kit and the ops covered (docs/plugins.md
records them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_thirdparty_wheel import _run, build_wheels

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MIXED_GRAPH = """
import numpy as np
import kernloom as kl

graph = kl.Graph()
with graph.as_default():
    x = kl.placeholder(kl.float32, [2, 3], name="x")
    with kl.device("CPU:0"):
        doubled = x + x
    with kl.device("ACME:0"):
        product = kl.ops.mat_mul(doubled, x, transpose_b=True)
    with kl.device("CPU:0"):
        out = kl.ops.relu(product)
metadata = kl.RunMetadata()
value = np.arange(6, dtype=np.float32).reshape(2, 3)
with kl.Session(graph) as session:
    result = session.run(out, {x: value}, run_metadata=metadata)
np.testing.assert_allclose(result, np.maximum((2 * value) @ value.T, 0))
print(metadata.placement[product.node.name])
print(sum(metadata.copies.values()))
"""


def _env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KERNLOOM_", "PYTHON", "VIRTUAL_ENV", "PYTEST_"))
    }


def _sh(*cmd: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command as a vendor types it, in ``cwd``, outside this test run's environment."""
    result = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of the core and the numpy CPU plugin, as a vendor gets them from PyPI."""
    tmp = tmp_path_factory.mktemp("scaffold")
    return build_wheels(tmp)


def test_a_new_plugin_installs_and_passes_the_kit(wheels: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    bin_dir = venv / "bin"
    _run(bin_dir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
         *sorted(wheels.glob("*.whl")), "pytest")  # fmt: skip
    work = tmp_path / "empty"
    work.mkdir()

    started = time.perf_counter()
    _sh(bin_dir / "kernloom", "plugin", "new", "acme", "--device-type", "ACME", cwd=work)
    _sh(bin_dir / "pip", "install", "-q", "--disable-pip-version-check", "./acme", cwd=work)
    report = tmp_path / "kit.json"
    _sh(bin_dir / "pytest", "--kernloom-device", "ACME", "--kernloom-report", report,
        "-p", "no:cacheprovider", cwd=work / "acme")  # fmt: skip
    elapsed = time.perf_counter() - started
    data = json.loads(report.read_text())
    conformant = data["summary"]["conformant"]
    cases = sum(op["cases"]["passed"] for op in data["ops"].values())
    print(
        f"\nplugin new -> green kit: {elapsed:.1f} s; {len(conformant)} ops conformant "
        f"({', '.join(conformant)}), {cases} kernel cases, "
        f"{len(data['summary']['no_kernel'])} ops without a kernel"
    )
    assert {"Add", "Sub", "Mul", "Less", "Relu", "MatMul"} <= set(conformant)
    assert data["executor"]["split-graph"]["status"] == "passed"

    script = tmp_path / "mixed.py"
    script.write_text(textwrap.dedent(MIXED_GRAPH))
    mixed = _sh(bin_dir / "python", script, cwd=work)
    placed, copies = mixed.stdout.split()
    assert placed == "/job:localhost/replica:0/task:0/device:ACME:0"
    assert int(copies) >= 3  # feed to CPU is free; CPU -> ACME twice, ACME -> CPU once
