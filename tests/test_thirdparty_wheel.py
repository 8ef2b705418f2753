"""A real third-party install: wheels of the core, the CPU plugin and an example vendor
plugin (tests/fixtures/apu_plugin), pip-installed into a fresh virtual environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".venv")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(*cmd: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert result.returncode in (0, 1), f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _copy_project(src: Path, dest: Path, *parts: str) -> Path:
    """Build from a copy, so that building never writes into the source tree."""
    dest.mkdir(parents=True)
    for part in parts:
        if (src / part).is_dir():
            shutil.copytree(src / part, dest / part, ignore=IGNORE)
        else:
            shutil.copy2(src / part, dest / part)
    return dest


def build_wheels(tmp: Path, *extra: Path) -> Path:
    """Wheels of the core, the numpy CPU plugin and the ``extra`` project copies, built from
    copies under ``tmp`` into ``tmp / "wheels"``: what a vendor gets from PyPI."""
    projects = [
        _copy_project(ROOT, tmp / "src" / "core", "pyproject.toml", "README.md", "core"),
        _copy_project(
            ROOT / "plugins" / "cpu_numpy", tmp / "src" / "cpu", "pyproject.toml",
            "kernloom_cpu_numpy",
        ),
        *extra,
    ]  # fmt: skip
    wheels = tmp / "wheels"
    for project in projects:
        _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--disable-pip-version-check", "-q", "-w", wheels, project)  # fmt: skip
    return wheels


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("thirdparty")
    apu = _copy_project(
        ROOT / "tests" / "fixtures" / "apu_plugin", tmp / "src" / "apu", "pyproject.toml",
        "kernloom_apu",
    )  # fmt: skip
    wheels = build_wheels(tmp, apu)
    built = sorted(p.name for p in wheels.glob("*.whl"))
    assert [n.split("-")[0] for n in built] == [
        "kernloom",
        "kernloom_apu_example",
        "kernloom_cpu_numpy",
    ]
    env_dir = tmp / "venv"
    _run(sys.executable, "-m", "venv", env_dir)
    _run(
        env_dir / "bin" / "python",
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        *sorted(wheels.glob("*.whl")),
    )
    return env_dir


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KERNLOOM_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(extra)
    return env


def _devices(venv: Path, **env: str) -> dict[str, object]:
    result = _run(venv / "bin" / "kernloom", "devices", "--json", env=_clean_env(**env))
    assert result.returncode == 0, result.stdout + result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_the_vendor_plugin_adds_a_type_and_shadows_numpy_cpu(venv: Path) -> None:
    data = _devices(venv)
    assert data["placement_order"] == ["APU", "CPU"]
    rows = {(r["device_type"], r["distribution"]): r for r in data["devices"]}  # type: ignore[attr-defined]
    apu = rows[("APU", "kernloom-apu-example")]
    assert apu["status"] == "in use" and apu["name"].endswith("/device:APU:0")
    vendor_cpu = rows[("CPU", "kernloom-apu-example")]
    numpy_cpu = rows[("CPU", "kernloom-cpu-numpy")]
    assert (vendor_cpu["status"], vendor_cpu["priority"]) == ("in use", 70)
    assert (numpy_cpu["status"], numpy_cpu["priority"]) == ("shadowed", 60)
    assert numpy_cpu["backend"] == "numpy"


def test_the_shadowed_numpy_cpu_is_selectable_from_the_environment(venv: Path) -> None:
    data = _devices(venv, KERNLOOM_DEVICE_FACTORY="CPU=cpu_numpy")
    rows = {(r["device_type"], r["distribution"]): r for r in data["devices"]}  # type: ignore[attr-defined]
    assert rows[("CPU", "kernloom-cpu-numpy")]["status"] == "in use"
    assert rows[("CPU", "kernloom-apu-example")]["status"] == "shadowed"


def test_plugins_lists_both_distributions(venv: Path) -> None:
    result = _run(venv / "bin" / "kernloom", "plugins", "--json", env=_clean_env())
    plugins = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}
    assert result.returncode == 0
    assert plugins["apu"]["distribution"] == "kernloom-apu-example"
    assert plugins["apu"]["version"] == "1.2.3"
    assert plugins["cpu_numpy"]["state"] == "loaded"


def test_disabling_the_vendor_plugin_restores_numpy_cpu(venv: Path) -> None:
    data = _devices(venv, KERNLOOM_DISABLE_PLUGINS="apu")
    assert data["placement_order"] == ["CPU"]
    (row,) = data["devices"]  # type: ignore[misc]
    assert row["distribution"] == "kernloom-cpu-numpy" and row["status"] == "in use"
