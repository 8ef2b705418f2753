"""Testing aids for kernloom and its plugins: a fake accelerator that needs no hardware.

Public surface, like ``kernloom`` itself: import from ``kernloom.testing``.
"""

from kernloom.testing.fake_device import FakeDevice, FakeDeviceFactory, fake_plugin
from kernloom.testing.kernel_harness import KernelRun, run_kernel

__all__ = ["FakeDevice", "FakeDeviceFactory", "KernelRun", "fake_plugin", "run_kernel"]
