"""The CPU kernels labelled ``torch``: the torch kernels on the numpy CPU device, zero-copy."""

from __future__ import annotations

import threading
import types
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_torch_kernels import on_gpu
from torch_helpers import CPU0

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_op
from kernloom.testing.cases import Case, assert_matches, cases
from kernloom.testing.cases.nn import lrn_reference
from kernloom_cpu_numpy import plugin as cpu_plugin
from kernloom_gpu_torch import plugin as torch_plugin
from kernloom_gpu_torch.kernels import CPU_LABEL, CPU_LABELLED_OPS


class _WithoutGPUs:
    """A registrar that passes everything on but GPU device factories."""

    def __init__(self, registrar: klp.Registrar) -> None:
        self._registrar = registrar

    def register_device_factory(self, device_type: str, *args: Any, **kwargs: Any) -> None:
        if device_type != "GPU":
            self._registrar.register_device_factory(device_type, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registrar, name)


def real_plugins() -> klp.Registry:
    """The installed plugins' own modules, torch's without its GPU factory: these tests are
    about the torch kernels on the CPU, on a machine with a GPU as on one without."""

    @klp.hookimpl
    def kernloom_register(registry: klp.Registrar) -> None:
        torch_plugin.kernloom_register(_WithoutGPUs(registry))

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(
        types.SimpleNamespace(
            kernloom_register=kernloom_register, KERNLOOM_API=torch_plugin.KERNLOOM_API
        ),
        name="gpu_torch",
    )
    return registry


REGISTRY = real_plugins()
LABELLED = [c for c in cases() if c.op in CPU_LABELLED_OPS and on_gpu(c)]


def test_every_labelled_op_has_cases() -> None:
    assert {c.op for c in LABELLED} == set(CPU_LABELLED_OPS)


@pytest.mark.parametrize("case", LABELLED, ids=[c.id for c in LABELLED])
def test_torch_labelled_cpu_kernel_matches_numpy(case: Case) -> None:
    values, metadata = run_op(REGISTRY, case.op, case.inputs, case.attrs, label=CPU_LABEL)
    assert metadata.placement is not None and metadata.placement["op"] == CPU0
    assert metadata.step_stats is not None
    stats = metadata.step_stats.for_node("op")
    assert stats.label == CPU_LABEL  # only the torch plugin registers that label on CPU
    assert_matches(values, case.expected())


def test_kernel_label_scope_selects_torch_on_any_machine() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    w = rng.standard_normal((32, 8)).astype(np.float32)
    graph = kl.Graph(REGISTRY)
    with graph.as_default():
        inp = kl.placeholder(kl.float32, (None, 32), name="x")
        with kl.kernel_label("torch"):
            probs = kl.ops.softmax(kl.ops.relu(kl.ops.mat_mul(inp, kl.constant(w))))
    metadata = kl.RunMetadata()
    with kl.Session(graph) as session:
        (out,) = session.run(
            [probs], {inp: x}, options=kl.RunOptions(trace=True), run_metadata=metadata
        )
    logits = np.maximum(x.astype(np.float64) @ w, 0)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert metadata.step_stats is not None
    labelled = [n for n in metadata.step_stats.nodes if n.op in ("MatMul", "Relu", "Softmax")]
    assert len(labelled) == 3 and all(n.label == "torch" for n in labelled)
    assert all(n.device == CPU0 for n in labelled)


def test_torch_view_of_a_cpu_value_shares_its_memory() -> None:
    """Zero-copy: what the labelled kernels see of a numpy input is the same memory, even
    for the read-only views the CPU device makes of fed values."""
    from kernloom_gpu_torch.kernels._util import tensor

    fed = np.arange(6, dtype=np.float32).reshape(2, 3)
    protected = fed.view()
    protected.flags.writeable = False
    seen = tensor(protected)
    assert seen.data_ptr() == fed.ctypes.data
    assert torch.equal(seen, torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert not protected.flags.writeable  # the caller's protection is left as it was


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from([(1, 5, 5, 64), (2, 3, 4, 7), (1, 2, 2, 1), (3, 1, 1, 30), (0, 2, 2, 3)]),
    radius=st.sampled_from([0, 1, 2, 5, 8, 9, 40]),
    beta=st.sampled_from([0.5, 0.75, 1.0, 0.3]),
    bias=st.sampled_from([1.0, 2.0, 1e-3]),
    dtype=st.sampled_from([np.float32, np.float16]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_cpu_lrn_over_short_and_wide_windows_matches_float64(
    shape: tuple[int, ...], radius: int, beta: float, bias: float, dtype: type, seed: int
) -> None:
    """The CPU default LRN (the torch kernel): sliding adds up to ``SLIDING_SUM_RADIUS``
    (a window wider than the channels included), the prefix sum beyond, each exponent
    TensorFlow special-cases and ``pow`` otherwise, float16 computed in float32."""
    x = np.random.default_rng(seed).uniform(-3, 3, shape).astype(dtype)
    attrs = {"depth_radius": radius, "bias": bias, "alpha": 0.4, "beta": beta}
    values, metadata = run_op(REGISTRY, "LRN", [x], attrs)
    assert metadata.step_stats is not None
    assert metadata.step_stats.for_node("op").kernel_class.endswith("conv.LocalResponseNorm")
    (y,) = values
    assert y.dtype == dtype and y.shape == shape
    tolerance = 2e-5 if dtype == np.float32 else 1e-3
    np.testing.assert_allclose(y, lrn_reference(attrs)(x), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("beta", [0.75, 0.5])
def test_an_lrn_run_again_and_from_threads_reuses_its_buffers_correctly(beta: float) -> None:
    """The kernel keeps its window buffers per input shape: runs that alternate shapes,
    and runs of one session from several threads at once (each takes its own set), give
    the reference's values every time."""
    attrs = {"depth_radius": 2, "bias": 1.0, "alpha": 0.4, "beta": beta}
    g = kl.Graph(REGISTRY)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 6, 5, 16], name="x")
        y = kl.ops.lrn(x, **attrs)
    rng = np.random.default_rng(5)
    feeds = [rng.uniform(-3, 3, (n, 6, 5, 16)).astype(np.float32) for n in (1, 3, 1, 2, 3)]
    with kl.Session(g, kl.SessionConfig(inter_op_threads=4)) as session:
        for feed in feeds:
            np.testing.assert_allclose(
                session.run(y, {x: feed}), lrn_reference(attrs)(feed), rtol=2e-5, atol=2e-5
            )
        results: dict[int, Any] = {}

        def run(i: int) -> None:
            for _ in range(20):
                results[i] = session.run(y, {x: feeds[i]})

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(feeds))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for i, feed in enumerate(feeds):
        np.testing.assert_allclose(results[i], lrn_reference(attrs)(feed), rtol=2e-5, atol=2e-5)
