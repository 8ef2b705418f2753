"""Test-wide setup: every machine runs the suite against the same devices.

A machine's real GPUs are hidden (``CUDA_VISIBLE_DEVICES`` is emptied before torch or
CuPy initialise CUDA): the core's tests place, fuse and check their graphs as on CI's
CPU-only machines, where a GPU plugin's kernels run on its stand-in device. Without
this, a developer with a GPU would see the suite fail wherever a test expects the CPU
(a ``device_filters=("GPU",)`` that must match nothing, a kernel name, a fusion the GPU
plugin does not make). ``make test-gpu`` sets ``KERNLOOM_TEST_GPU=1`` and runs the GPU
plugins' own tests, the conformance kit among them, on the real GPU.
"""

from __future__ import annotations

import os

if os.environ.get("KERNLOOM_TEST_GPU") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
