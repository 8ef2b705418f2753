"""kernloom's CuPy plugin: a ``GPU`` device (priority 210, backend ``cupy``) for every
visible CUDA device, with kernels for the standard op library written against CuPy's
numpy-compatible API and fused kernels (label ``fused``) compiled with
``cupy.ElementwiseKernel``."""

from kernloom_gpu_cupy.plugin import GPU_PRIORITY, PLUGIN_NAME

__all__ = ["GPU_PRIORITY", "PLUGIN_NAME"]
