"""Our tests must pass with third-party plugins installed beside them (vendors run them).

A test that builds on the default registry checks whatever happens to be installed: a
vendor's CPU factory of higher priority, or a kernel library with its own labels, changes
what it runs. The core's and the numpy plugin's tests build their own registries; this
test runs a sample of them -- among them those that once used the default registry --
in a child process that has two more plugins installed through the real entry-point
machinery (a ``.dist-info`` on ``sys.path``): a CPU factory of higher priority than
numpy's, a GPU factory that finds a device everywhere, and a kernel library.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = [
    "tests/test_cli_run.py",
    "plugins/cpu_numpy/tests/test_float_errors.py",
    "plugins/cpu_numpy/tests/test_kernels.py",
    "tests/test_session.py",
    "tests/test_value_ownership.py",
]


def _install(site: Path, name: str, entry_point: str) -> None:
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[kernloom]\n{name} = {entry_point}\n")


def test_the_core_tests_pass_beside_third_party_plugins(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    # A vendor's devices: a CPU factory above numpy's (80 > 60), a GPU factory above
    # CuPy's and torch's that finds a device everywhere.
    (site / "vendor_devices.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            import kernloom
            import kernloom.plugin as klp

            KERNLOOM_API = ">=1.0,<2"


            class VendorDevice(klp.Device):
                def _allocate(self, shape, dtype):
                    return np.empty(shape, dtype.numpy_dtype)

                def copy_from_host(self, array):
                    out = self.allocate(array.shape, array.dtype)
                    np.copyto(out, array)
                    return out

                def copy_to_host(self, value):
                    return np.array(value, copy=True)


            class VendorFactory(klp.DeviceFactory):
                def __init__(self, device_type):
                    self.device_type = device_type

                def list_physical_devices(self):
                    return [f"/physical_device:{self.device_type}:0"]

                def create_devices(self, options, name_prefix=klp.LOCAL_PREFIX):
                    attributes = klp.DeviceAttributes(
                        name=klp.full_device_name(name_prefix, self.device_type, 0),
                        device_type=self.device_type,
                        backend="numpy",
                        memory_limit=1 << 30,
                        physical_device_desc="a vendor's device",
                    )
                    return [VendorDevice(attributes)]
            """
        )
    )
    for kind, device_type, priority in (("cpu", "CPU", 80), ("gpu", "GPU", 300)):
        (site / f"vendor_{kind}.py").write_text(
            textwrap.dedent(
                f"""
                import kernloom
                import kernloom.plugin as klp
                from vendor_devices import VendorFactory

                KERNLOOM_API = ">=1.0,<2"


                @klp.hookimpl
                def kernloom_register(registry):
                    registry.register_device_factory(
                        "{device_type}", VendorFactory("{device_type}"), priority={priority}
                    )
                """
            )
        )
        _install(site, f"vendor_{kind}", f"vendor_{kind}")
    # A kernel library: a new op without a shape function and a new MatMul label.
    (site / "vendor_lib.py").write_text(
        textwrap.dedent(
            """
            import kernloom
            import kernloom.plugin as klp

            KERNLOOM_API = ">=1.0,<2"


            @klp.hookimpl
            def kernloom_register(registry):
                registry.register_op("VendorOp").input("x: float32").output("y: float32")
                lib = klp.KernelLibrary()

                @lib.kernel("VendorOp", device="CPU")
                def vendor_op(ctx):
                    ctx.set_output(0, ctx.input(0).copy())

                @lib.kernel("MatMul", device="CPU", label="vendor")
                def mat_mul(ctx):
                    ctx.set_output(0, ctx.input(0) @ ctx.input(1))

                registry.register_kernels(lib)
            """
        )
    )
    _install(site, "vendor_lib", "vendor_lib")
    env = dict(os.environ)
    for variable in ("KERNLOOM_PLUGINS", "KERNLOOM_DISABLE_PLUGINS", "KERNLOOM_STRICT_PLUGINS"):
        env.pop(variable, None)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    listed = subprocess.run(
        [sys.executable, "-m", "kernloom", "plugins", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,  # exit 1 when some plugin failed: what else is installed is not ours
    )
    loaded = {p["name"] for p in json.loads(listed.stdout)["plugins"] if p["state"] == "loaded"}
    assert {"vendor_cpu", "vendor_gpu", "vendor_lib", "cpu_numpy"} <= loaded
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *SAMPLE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_importing_kernloom_loads_no_plugin() -> None:
    """Importing the CLI (or anything ``from kernloom.ops import ...``) must not load the
    installed plugins: a broken one would then fail every importer, tests included."""
    code = (
        "import kernloom, kernloom.cli, kernloom.demo\n"
        "from kernloom.ops import wrapper\n"
        "import kernloom.registry as r\n"
        "assert r._default is None, 'the default registry was built at import'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_the_suite_hides_real_gpus_unless_asked() -> None:
    """The root conftest.py empties CUDA_VISIBLE_DEVICES for every run but ``make
    test-gpu``'s (KERNLOOM_TEST_GPU=1), before torch or CuPy can initialise CUDA."""
    if os.environ.get("KERNLOOM_TEST_GPU") == "1":
        pytest.skip("make test-gpu: the real GPUs are the point")
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == ""
