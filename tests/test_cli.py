"""The `kernloom` command, on entry points faked through importlib.metadata."""

from __future__ import annotations

import importlib.metadata
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from plugin_helpers import Install, factory_plugin

from kernloom.cli import main
from kernloom.hooks import KERNLOOM_API_VERSION
from kernloom.op_library import standard_ops

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    for var in (
        "KERNLOOM_PLUGINS",
        "KERNLOOM_DISABLE_PLUGINS",
        "KERNLOOM_STRICT_PLUGINS",
        "KERNLOOM_DEVICE_FACTORY",
    ):
        monkeypatch.delenv(var, raising=False)

    def invoke(
        *argv: str, eps: list[importlib.metadata.EntryPoint] | None = None, **env: str
    ) -> tuple[int, str, str]:
        if eps is not None:
            monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: eps)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_devices_table_shows_in_use_and_shadowed(run: Run, install: Install) -> None:
    eps = [
        install("low", factory_plugin("CPU", 60)),
        install("high", factory_plugin("CPU", 70)),
        install("gpu", factory_plugin("GPU", 210)),
    ]
    code, out, _ = run("devices", eps=eps)
    assert code == 0
    assert "/job:localhost/replica:0/task:0/device:GPU:0" in out
    lines = out.splitlines()
    gpu_row = next(line for line in lines if "device:GPU:0" in line)
    assert "in use" in gpu_row and "210" in gpu_row
    cpu_rows = [line for line in lines if "device:CPU:0" in line]
    assert len(cpu_rows) == 2  # the shadowed factory's device is listed too
    assert any("shadowed" in r and "low" in r for r in cpu_rows)
    assert any("in use" in r and "high" in r for r in cpu_rows)
    assert "placement order: GPU > CPU" in out


def test_devices_json(run: Run, install: Install) -> None:
    eps = [
        install("low", factory_plugin("CPU", 60)),
        install("high", factory_plugin("CPU", 70)),
        install("none", factory_plugin("GPU", 210, count=0)),
    ]
    code, out, _ = run("devices", "--json", eps=eps)
    assert code == 0
    data = json.loads(out)
    assert data["placement_order"] == ["GPU", "CPU"]
    rows = {(r["device_type"], r["plugin"]): r for r in data["devices"]}
    assert rows[("CPU", "high")]["status"] == "in use"
    assert rows[("CPU", "low")]["status"] == "shadowed"
    assert rows[("CPU", "high")]["name"] == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert rows[("CPU", "high")]["memory_limit"] == 1 << 30
    assert rows[("GPU", "none")]["status"] == "unavailable"
    assert "no GPU hardware" in rows[("GPU", "none")]["reason"]


def test_env_override_shows_in_the_table(run: Run, install: Install) -> None:
    eps = [install("low", factory_plugin("CPU", 60)), install("high", factory_plugin("CPU", 70))]
    code, out, _ = run("devices", "--json", eps=eps, KERNLOOM_DEVICE_FACTORY="CPU=low")
    rows = {r["plugin"]: r for r in json.loads(out)["devices"]}
    assert code == 0
    assert (
        rows["low"]["status"] == "in use"
        and rows["low"]["reason"] == "selected by KERNLOOM_DEVICE_FACTORY"
    )
    assert rows["high"]["status"] == "shadowed"


def test_plugins_lists_loaded_and_failed_with_reasons(run: Run, install: Install) -> None:
    eps = [install("good", factory_plugin("CPU", 60)), install("bad", "raise ImportError('nope')")]
    code, out, _ = run("plugins", eps=eps)
    assert code == 1
    assert "good" in out and "loaded" in out and "device factory CPU (priority 60)" in out
    assert "bad" in out and "failed" in out and "ImportError: nope" in out
    assert "Traceback" not in out
    code, out, _ = run("plugins", "--verbose", eps=eps)
    assert code == 1 and "Traceback" in out and "klplugin_bad.py" in out


def test_plugins_json(run: Run, install: Install) -> None:
    eps = [install("good", factory_plugin("CPU", 60)), install("bad", "raise ImportError('nope')")]
    code, out, _ = run("plugins", "--json", eps=eps)
    data = json.loads(out)
    assert code == 1
    states = {p["name"]: p["state"] for p in data["plugins"]}
    assert states == {"bad": "failed", "good": "loaded"}
    assert data["plugin_api"] == KERNLOOM_API_VERSION == "1.12"


def test_exit_codes(run: Run, install: Install) -> None:
    good = [install("good", factory_plugin("CPU", 60))]
    assert run("plugins", eps=good)[0] == 0
    assert run("devices", eps=[*good, install("bad", "raise ImportError()")])[0] == 1
    assert run("frobnicate", eps=good)[0] == 2
    assert run("devices", "--bogus", eps=good)[0] == 2
    code, _, err = run("devices", eps=good, KERNLOOM_DEVICE_FACTORY="GPU")
    assert code == 2 and "is not TYPE=plugin" in err
    code, _, err = run("devices", eps=good, KERNLOOM_DEVICE_FACTORY="GPU=x")
    assert code == 2 and "no plugin registers a GPU device factory" in err


def test_strict_mode_fails_at_start_up(run: Run, install: Install) -> None:
    eps = [install("good", factory_plugin("CPU", 60)), install("bad", "raise ImportError('nope')")]
    code, out, err = run("devices", eps=eps, KERNLOOM_STRICT_PLUGINS="1")
    assert code == 1 and out == ""
    assert "plugin 'bad'" in err and "KERNLOOM_STRICT_PLUGINS" in err


def test_no_plugins_at_all_says_what_to_install(run: Run) -> None:
    code, out, _ = run("devices", eps=[])
    assert code == 1 and "pip install kernloom-cpu-numpy" in out
    code, out, _ = run("plugins", eps=[])
    assert code == 0 and "no kernloom plugins are installed" in out


def test_version(run: Run) -> None:
    code, out, _ = run("--version")
    assert code == 0 and f"plugin API {KERNLOOM_API_VERSION}" in out and "1.12" in out


def test_ops_lists_signatures_and_attrs(run: Run) -> None:
    code, out, _ = run("ops", "MatMul", eps=[])
    assert code == 0
    assert "(a: T, b: T) -> (product: T)" in out and "transpose_a: bool = false" in out
    code, out, _ = run("ops", "--json", eps=[])
    ops = {o["name"]: o for o in json.loads(out)}
    public = {n for n in standard_ops().names() if not n.startswith("_")}
    assert set(ops) == public and ops["ConcatV2"]["attrs"][0] == "N: int >= 2"
    code, _, err = run("ops", "Matmul", eps=[])
    assert code == 2 and "Did you mean 'MatMul'" in err
    code, out, _ = run("ops", "--json", "--all", eps=[])
    assert {"_Send", "_Recv"} <= {o["name"] for o in json.loads(out)}


KERNELS_PLUGIN = """
lib = klp.KernelLibrary()

@lib.kernel("Relu", device="CPU", label="fast", type_constraints={"T": ["float32"]})
def relu(ctx):
    pass

@lib.kernel("Tanh", device="GPU")
def tanh(ctx):
    pass

@klp.hookimpl
def kernloom_register(registry):
    registry.register_kernels(lib)
"""


def test_kernels_filters_by_op_and_device(run: Run, install: Install) -> None:
    eps = [install("k", KERNELS_PLUGIN)]
    code, out, _ = run("kernels", "--json", eps=eps)
    assert code == 0 and len(json.loads(out)) == 2
    code, out, _ = run("kernels", "--json", "--op", "Relu", eps=eps)
    (row,) = json.loads(out)
    assert (row["label"], row["constraints"], row["plugin"]) == ("fast", {"T": ["float32"]}, "k")
    code, out, _ = run("kernels", "--json", "--device", "GPU", eps=eps)
    assert [r["op"] for r in json.loads(out)] == ["Tanh"]
    for spelled in ("gpu", "GPU:0", "/device:GPU:0"):  # as device names are written elsewhere
        code, out, _ = run("kernels", "--json", "--device", spelled, eps=eps)
        assert code == 0 and [r["op"] for r in json.loads(out)] == ["Tanh"], spelled
    code, out, err = run("kernels", "--device", "Nope", eps=eps)
    assert code == 2 and "--device Nope: no device type 'Nope'; types: " in err
    code, out, _ = run("kernels", "--op", "Relu", eps=eps)
    assert code == 0 and "fast" in out and "T in {float32}" in out
    code, out, _ = run("kernels", "--op", "Softmax", eps=eps)
    assert code == 0 and "no kernel is registered for op Softmax" in out
    code, _, err = run("kernels", "--op", "Sofmax", eps=eps)
    assert code == 2 and "Did you mean 'Softmax'" in err


_MARKUP_PLUGIN = """
from kernloom.testing import FakeDeviceFactory as _Fake
lib = klp.KernelLibrary()

@lib.kernel("Identity", device="ACCEL", label="[b]fast[/b]")
def ident(ctx):
    ctx.set_output(0, ctx.input(0))

@klp.hookimpl
def kernloom_register(registry):
    registry.register_device_factory(
        "GPU", _Fake("GPU", count=0, unavailable_reason="pip install 'kernloom-gpu-cupy[cuda12]'"),
        priority=210)
    registry.register_device_factory("ACCEL", _Fake("ACCEL", backend="[/dev/accel0]"), priority=5)
    registry.register_kernels(lib)
"""


def test_plugin_text_is_shown_as_written_never_as_rich_markup(run: Run, install: Install) -> None:
    """``[cuda12]`` must survive in an install hint and ``[/dev/accel0]`` must not crash:
    every plugin- or user-supplied string reaches the terminal verbatim, in every table."""
    module = install("accel", _MARKUP_PLUGIN)
    odd = importlib.metadata.EntryPoint(name="[/dev/accel0]", value=module.value, group="kernloom")
    broken = install("broken", "raise ImportError('needs [/dev/accel0] and [bold]x[/bold]')")
    eps = [odd, broken]
    code, out, err = run("devices", eps=eps)
    assert "pip install 'kernloom-gpu-cupy[cuda12]'" in out
    assert "[/dev/accel0]" in out  # the backend and the plugin's name
    assert "Traceback" not in out + err
    code, out, err = run("plugins", eps=eps)
    assert "needs [/dev/accel0] and [bold]x[/bold]" in out.replace("\n", " ")
    assert "[/dev/accel0]" in out
    code, out, err = run("kernels", "--op", "Identity", "--device", "ACCEL", eps=eps)
    assert code == 0 and "[b]fast[/b]" in out and "[/dev/accel0]" in out
    code, out, _ = run("ops", "AssignVariableOp", eps=eps)
    assert code == 0 and "AssignVariableOp [stateful]" in out  # our own text is not markup either


def test_every_console_in_the_packages_leaves_markup_off() -> None:
    """The class, not the instances: a console that reads markup shows plugin text wrong."""
    root = Path(__file__).resolve().parents[1]
    sources = [*(root / "core").rglob("*.py"), *(root / "plugins").glob("*/kernloom_*/**/*.py")]
    calls = [
        (source, match.group(0))
        for source in sources
        for match in re.finditer(r"Console\((?:[^()]|\([^()]*\))*\)", source.read_text())
    ]
    assert calls, "no rich console found: the pattern is stale"
    assert [(s.name, c) for s, c in calls if "markup=False" not in c] == []


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly() -> None:
    """``kernloom ops --json | head -1``: no BrokenPipeError traceback on stderr."""
    import subprocess
    import sys

    command = f"{sys.executable} -m kernloom ops --json | head -c 10"
    done = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
    assert done.stdout.startswith("[")
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["devices", "--bogus"], "usage: kernloom devices [-h] [--json]"),
        (["kernels", "--json", "--bogus", "x"], "usage: kernloom kernels [-h]"),
        (["plugin", "new", "acme", "--bogus"], "usage: kernloom plugin new [-h]"),
    ],
)
def test_an_unknown_flag_is_refused_in_its_commands_usage(
    run: Run, argv: list[str], usage: str
) -> None:
    code, out, err = run(*argv)
    assert (code, out) == (2, "")
    assert err.startswith(usage)
    command = usage.removeprefix("usage: ").partition(" [")[0]
    unknown = " ".join(argv[argv.index("--bogus") :])
    assert err.rstrip().endswith(f"{command}: error: unrecognized arguments: {unknown}")
