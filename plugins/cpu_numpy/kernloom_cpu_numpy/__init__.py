"""kernloom-cpu-numpy: the CPU device, with numpy arrays as its buffers."""

from kernloom_cpu_numpy.device import NumpyCPUDevice, NumpyCPUDeviceFactory
from kernloom_cpu_numpy.threadpool import IntraOpPool

__all__ = ["IntraOpPool", "NumpyCPUDevice", "NumpyCPUDeviceFactory"]
