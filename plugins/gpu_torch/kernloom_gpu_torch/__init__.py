"""kernloom's PyTorch plugin: a ``GPU`` device (priority 200, backend ``torch``) for every
``torch.cuda`` device, kernels for the standard op library written with torch, and CPU
kernels labelled ``torch`` that run on the numpy CPU device through zero-copy
``torch.from_numpy``.
"""

from kernloom_gpu_torch.plugin import GPU_PRIORITY, PLUGIN_NAME

__all__ = ["GPU_PRIORITY", "PLUGIN_NAME"]
