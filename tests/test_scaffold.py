"""``kernloom plugin new``: the files it writes, what they import, and the kit on them.

The real thing (a fresh virtual environment, ``pip install ./acme``, ``pytest``) is the slow
test in ``test_scaffold_install.py``; here the generated package is imported from its
directory and given to the kit through the registry hook.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernloom.cli import main

pytest_plugins = ["pytester"]

ALLOWED = {"__future__", "collections", "typing", "numpy", "pytest", "kernloom"}
KERNLOOM_MODULES = {"kernloom", "kernloom.plugin", "kernloom.testing"}


def _new(tmp_path: Path, *args: str) -> Path:
    assert main(["plugin", "new", *args, "--dir", str(tmp_path)]) == 0
    return tmp_path / args[0]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("variant", [[], ["--kernels-only"]], ids=["device", "kernels-only"])
def test_the_package_imports_only_the_public_surfaces(tmp_path: Path, variant: list[str]) -> None:
    root = _new(tmp_path, "acme", *variant)
    package = "kernloom_acme"
    for path in root.rglob("*.py"):
        for module in _imports(path):
            top = module.split(".")[0]
            if top == package:
                continue
            assert top in ALLOWED, f"{path.name} imports {module}"
            if top == "kernloom":
                assert module in KERNLOOM_MODULES, f"{path.name} imports {module}"


@pytest.mark.parametrize("variant", [[], ["--kernels-only"]], ids=["device", "kernels-only"])
def test_the_package_is_ruff_clean_and_complete(tmp_path: Path, variant: list[str]) -> None:
    root = _new(tmp_path, "acme_npu", *variant)
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    expected = ["README.md", "kernloom_acme_npu/__init__.py", "kernloom_acme_npu/kernels.py"]
    expected += ["kernloom_acme_npu/plugin.py", "pyproject.toml", "tests/test_acme_npu.py"]
    if not variant:
        expected.insert(2, "kernloom_acme_npu/device.py")
    assert names == expected
    pyproject = (root / "pyproject.toml").read_text()
    assert 'acme_npu = "kernloom_acme_npu.plugin"' in pyproject
    assert 'name = "kernloom-acme-npu"' in pyproject
    device = "CPU" if variant else "ACME_NPU"
    assert f"--kernloom-device {device}" in pyproject
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run(
        [ruff, "check", "--isolated", "--select", "E,F,W,I,B,UP", "--line-length", "100", "."],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


def test_bad_names_and_existing_directories_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugin", "new", "Acme-1", "--dir", str(tmp_path)]) == 2
    assert "plugin name 'Acme-1' must be a lower-case Python identifier" in capsys.readouterr().err
    assert main(["plugin", "new", "acme", "--device-type", "acme", "--dir", str(tmp_path)]) == 2
    assert "device type 'acme' must be an upper-case name" in capsys.readouterr().err
    _new(tmp_path, "acme")
    assert main(["plugin", "new", "acme", "--dir", str(tmp_path)]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_a_dir_that_is_or_is_under_a_file_is_a_usage_error_naming_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    directory = file if where == "file" else file / "sub"
    problem = "is a file, not a directory" if where == "file" else f"{file} is a file, not a"
    assert main(["plugin", "new", "acme", "--dir", str(directory)]) == 2
    out, err = capsys.readouterr()
    assert err.replace("\n", " ").startswith(f"error: --dir {directory}: {problem}")
    assert "give a directory you can write" in err.replace("\n", " ")
    assert out == "" and file.read_text() == "mine"


def test_a_dir_that_cannot_be_created_is_a_usage_error_naming_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    directory = tmp_path / "out"
    assert main(["plugin", "new", "acme", "--dir", str(directory)]) == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert err.startswith(
        f"error: --dir {directory}: cannot create {directory / 'acme'}: permission denied; "
        "give a directory you can write"
    )


def test_a_name_taken_by_an_installed_plugin_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The numpy CPU plugin is installed wherever kernloom's tests run.
    assert main(["plugin", "new", "cpu_numpy", "--dir", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "error: plugin name 'cpu_numpy' clashes with what is installed:" in err
    assert "distribution kernloom-cpu-numpy (version" in err
    assert "import package kernloom_cpu_numpy (of distribution kernloom-cpu-numpy)" in err
    assert (
        "kernloom entry point 'cpu_numpy' (kernloom_cpu_numpy.plugin, of distribution "
        "kernloom-cpu-numpy)" in err
    )
    assert err.endswith("pick another name")
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_name_taken_only_by_an_entry_point_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    other = importlib.metadata.EntryPoint("acme", "vendor_acme.plugin", "kernloom")
    real = importlib.metadata.entry_points

    def entry_points(**params: str) -> importlib.metadata.EntryPoints:
        found = real(**params)
        if params.get("group") == "kernloom":
            return importlib.metadata.EntryPoints([*found, other])
        return found

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert main(["plugin", "new", "acme", "--dir", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "plugin name 'acme' clashes with what is installed: kernloom entry point 'acme' "
        "(vendor_acme.plugin, of distribution unknown)." in err
    )
    assert list(tmp_path.iterdir()) == []


REGISTRY_HOOK = """
import kernloom
import kernloom.plugin as klp
from kernloom_cpu_numpy import plugin as cpu_plugin
from {package} import plugin


def pytest_kernloom_registry(config):
    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(plugin, name="{name}")
    return registry
"""


def test_the_generated_device_passes_the_kit_with_its_copies_counted(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    root = _new(tmp_path, "acme")
    pytester.syspathinsert(root)
    pytester.makeconftest(
        textwrap.dedent(REGISTRY_HOOK.format(package="kernloom_acme", name="acme"))
    )
    report = pytester.path / "kit.json"
    result = pytester.runpytest(
        "--kernloom-device", "ACME", "--kernloom-report", str(report), "-p", "no:cacheprovider"
    )
    assert result.ret == 0, result.stdout.str()
    data = json.loads(report.read_text())
    assert {"Add", "Sub", "Mul", "Less", "Relu", "MatMul"} <= set(data["summary"]["conformant"])
    assert data["summary"]["failures"] == []
    assert data["executor"]["split-graph"]["status"] == "passed"  # CPU <-> ACME, copies counted
    assert data["executor"]["while-loop"]["status"] == "passed"


def test_the_generated_kernel_library_passes_the_kit_for_its_own_kernels(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    root = _new(tmp_path, "fastmm", "--kernels-only")
    pytester.syspathinsert(root)
    pytester.makeconftest(
        textwrap.dedent(REGISTRY_HOOK.format(package="kernloom_fastmm", name="fastmm"))
    )
    report = pytester.path / "kit.json"
    result = pytester.runpytest(
        "--kernloom-device",
        "CPU",
        "--kernloom-plugin",
        "fastmm",
        "--kernloom-report",
        str(report),
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 0, result.stdout.str()
    data = json.loads(report.read_text())
    assert sorted(data["ops"]) == ["MatMul", "Relu"]  # only the library's kernels
    assert data["ops"]["MatMul"]["dtypes"]["float64 [fastmm]"] == "passed"
    assert data["executor"]["labels[MatMul=fastmm]"]["status"] == "passed"
