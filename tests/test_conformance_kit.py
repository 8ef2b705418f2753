"""The conformance kit as a vendor meets it: ``pytest --kernloom-device ACME`` in a project
whose ``conftest.py`` gives the kit a registry holding a small ACME plugin.

The plugin is written here in a few variants: correct, with an ``Add`` kernel that computes
the wrong value, with a dtype it claims but cannot run, and with a device that loses
values in copies. The kit must pass the first and fail the others, naming the op, dtype
and device in the failure and in the summary (and in the JSON report).
"""

from __future__ import annotations

import json
import textwrap

import pytest

pytest_plugins = ["pytester"]

PLUGIN = """
import types

import numpy as np

import kernloom
import kernloom.plugin as klp

ACME = "ACME"
ADD_TYPES = ["float32", "float64", "int32"]
WRONG_BY = 0          # added to every float32 sum: 0 is correct
CANNOT_RUN = ()       # dtypes the Add kernel claims but raises for
COPY_TO_HOST_DTYPE = None  # a dtype copy_to_host wrongly converts to


class AcmeDevice(klp.Device):
    def _allocate(self, shape, dtype):
        return np.empty(shape, dtype.numpy_dtype)

    def copy_from_host(self, array):
        out = self.allocate(np.shape(array), np.asarray(array).dtype)
        out[...] = array
        return out

    def copy_to_host(self, value):
        if COPY_TO_HOST_DTYPE is not None:
            return np.array(value, dtype=COPY_TO_HOST_DTYPE)
        return np.array(value, copy=True)


class AcmeFactory(klp.DeviceFactory):
    def list_physical_devices(self):
        return ["/physical_device:ACME:0"]

    def create_devices(self, options, name_prefix=klp.LOCAL_PREFIX):
        return [
            AcmeDevice(
                klp.DeviceAttributes(
                    name=klp.full_device_name(name_prefix, ACME, i),
                    device_type=ACME,
                    backend="acme",
                    memory_limit=options.memory_limit.get(ACME, 1 << 30),
                )
            )
            for i in range(klp.device_count_for(options, ACME, 1))
        ]


lib = klp.KernelLibrary()


@lib.kernel("Add", device=ACME, type_constraints={"T": ADD_TYPES})
def add(ctx):
    x, y = ctx.input(0), ctx.input(1)
    if x.dtype.name in CANNOT_RUN:
        raise TypeError(f"ACME cannot add {x.dtype}")
    out = ctx.allocate_output(0, np.broadcast_shapes(x.shape, y.shape))
    np.add(x, y, out=out)
    if out.dtype == np.float32:
        out += WRONG_BY


@lib.kernel("Mul", device=ACME, type_constraints={"T": ["float32"]})
def mul(ctx):
    x, y = ctx.input(0), ctx.input(1)
    np.multiply(x, y, out=ctx.allocate_output(0, np.broadcast_shapes(x.shape, y.shape)))


@lib.kernel("Less", device=ACME, type_constraints={"T": ["int32"]})
def less(ctx):
    x, y = ctx.input(0), ctx.input(1)
    np.less(x, y, out=ctx.allocate_output(0, np.broadcast_shapes(x.shape, y.shape)))


@klp.hookimpl
def kernloom_register(registry):
    registry.register_device_factory(ACME, AcmeFactory(), priority=100)
    registry.register_kernels(lib)


plugin = types.SimpleNamespace(kernloom_register=kernloom_register, KERNLOOM_API=">=1.0,<2")


def pytest_kernloom_registry(config):
    registry = klp.Registry()
    registry.register_plugin(plugin, name="acme")
    return registry
"""


def _project(pytester: pytest.Pytester, **settings: object) -> None:
    text = PLUGIN
    for name, value in settings.items():
        text = text.replace(f"\n{name} = ", f"\n{name} = {value!r}  # was: ", 1)
    pytester.makeconftest(textwrap.dedent(text))


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--kernloom-device", "ACME", "-p", "no:cacheprovider", *args)


def _report(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, object]]:
    path = pytester.path / "kit.json"
    result = _run(pytester, "--kernloom-report", str(path), *args)
    data: dict[str, object] = json.loads(path.read_text())
    return result, data


def test_a_correct_plugin_passes_and_the_summary_says_what_has_no_kernel(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester)
    result, data = _report(pytester)
    assert result.ret == 0
    assert "failed" not in result.parseoutcomes()
    assert data["device_type"] == "ACME"
    summary = data["summary"]
    assert isinstance(summary, dict)
    assert {"Add", "Mul", "Identity", "Const"} <= set(summary["conformant"])
    assert summary["failures"] == []
    assert "MatMul" in summary["no_kernel"] and "Add" not in summary["no_kernel"]
    ops = data["ops"]
    assert isinstance(ops, dict)
    assert ops["Add"]["dtypes"]["float32"] == "passed"
    assert ops["Add"]["dtypes"]["int64"] == "no kernel"  # ACME claims int32, not int64
    assert ops["Mul"]["dtypes"]["float64"] == "no kernel"
    assert data["claimed_dtypes"] == ["float32", "float64", "int32"]
    contract = data["device_contract"]
    assert isinstance(contract, dict)
    assert contract["copies[int32]"]["status"] == "passed"
    assert contract["memory-limit"]["status"] == "passed"
    executor = data["executor"]
    assert isinstance(executor, dict)
    for check in ("cond", "while-loop", "concurrent-runs", "kernel-error"):
        assert executor[check]["status"] == "passed", executor[check]
    assert executor["split-graph"]["status"] == "skipped"  # no CPU in this registry
    result.stdout.fnmatch_lines(
        [
            "*kernloom conformance: ACME*",
            "ops conformant: *Add*",
            "ops with failures: 0",
            "ops without a kernel on ACME: * (Abs, Acos, Acosh, AddN, *",
        ]
    )


def test_a_wrong_add_fails_naming_op_dtype_and_device(pytester: pytest.Pytester) -> None:
    _project(pytester, WRONG_BY=1)
    result, data = _report(pytester)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*Add float32 on ACME (/job:localhost/replica:0/task:0/device:ACME:0), kernel "
            "conftest.add from plugin 'acme', case 'Add-float32-*': wrong result: output 0 "
            "differs*",
            "ops with failures: 1",
            "  Add: failed for float32 on ACME (4 case(s)); first: Add float32 on ACME*",
        ]
    )
    ops = data["ops"]
    assert isinstance(ops, dict)
    add = ops["Add"]
    assert add["status"] == "failures"
    assert add["dtypes"]["float32"] == "failed"
    assert add["dtypes"]["float64"] == "passed"
    assert {f["dtype"] for f in add["failures"]} == {"float32"}
    assert "Add float32 on ACME" in add["failures"][0]["message"]
    assert data["summary"]["failures"] == ["Add"]  # type: ignore[index]


def test_a_claimed_dtype_the_kernel_cannot_run_fails(pytester: pytest.Pytester) -> None:
    _project(pytester, CANNOT_RUN=("int32",))
    result, data = _report(pytester, "-k", "Add")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*Add int32 on ACME (*device:ACME:0)*: the run failed: *ACME cannot add int32*",
            "  Add: failed for int32 on ACME*",
        ]
    )
    assert data["ops"]["Add"]["dtypes"]["int32"] == "failed"  # type: ignore[index]


def test_a_copy_that_changes_the_dtype_fails_the_device_contract(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester, COPY_TO_HOST_DTYPE="float64")
    result, data = _report(pytester, "-k", "device")
    result.stdout.fnmatch_lines(
        [
            "*float32 copy of a 3x4 array to and from *device:ACME:0: dtype float64, "
            "expected float32*",
        ]
    )
    assert "failed (failed: copies[float32], copies[int32])" in result.stdout.str()
    contract = data["device_contract"]
    assert isinstance(contract, dict)
    assert contract["copies[float64]"]["status"] == "passed"
    assert contract["copies[float32]"]["status"] == "failed"


def test_an_unknown_device_type_is_a_usage_error_naming_what_exists(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester)
    result = pytester.runpytest("--kernloom-device", "NOPE", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--kernloom-device NOPE: no device of type NOPE was created; devices: ACME*"]
    )


@pytest.mark.parametrize("where", ["missing/kit.json", ".", "file.txt/kit.json"])
def test_a_report_path_the_kit_cannot_write_is_a_usage_error_before_any_check(
    pytester: pytest.Pytester, where: str
) -> None:
    _project(pytester)
    (pytester.path / "file.txt").write_text("")
    path = pytester.path / where
    result = _run(pytester, "--kernloom-report", str(path))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    problem = {
        "missing/kit.json": f"directory {path.parent} does not exist; create it, or give a "
        "file in an existing directory",
        ".": f"is a directory; give a file name, e.g. {path / 'kit.json'}",
        "file.txt/kit.json": f"{path.parent} is a file, not a directory",
    }[where]
    assert f"ERROR: --kernloom-report {path}: {problem}" in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert "passed" not in result.stdout.str()  # refused before any check ran


def test_without_the_option_the_kit_adds_nothing_and_imports_nothing(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_plain="""
        import sys

        def test_kernloom_was_not_imported():
            assert [m for m in sys.modules if m.split(".")[0] == "kernloom"] == []
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "kernloom conformance" not in result.stdout.str()


def test_the_kit_loads_with_p_where_autoloading_is_off(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess(
        "-p", "kernloom.testing.conformance", "--kernloom-device", "ACME", "-k", "Mul"
    )
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*kernloom conformance: ACME*"])


def test_the_registry_can_come_from_a_function(pytester: pytest.Pytester) -> None:
    _project(pytester)
    conftest = pytester.path / "conftest.py"
    module = pytester.path / "acme_registry.py"
    module.write_text(
        conftest.read_text().replace("def pytest_kernloom_registry(config)", "def registry()")
    )
    conftest.unlink()
    result = pytester.runpytest_subprocess(
        "--kernloom-device",
        "ACME",
        "--kernloom-registry",
        "acme_registry:registry",
        "-k",
        "Mul",
    )
    result.assert_outcomes(passed=5)
