"""The torch GPU factory without a GPU, the device contract on a CPU-bound torch device,
and placement, copies, variables and loops through a session with the torch GPU."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch_helpers import CPU0, GPU0, torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import FakeDeviceFactory, fake_plugin, run_op
from kernloom_gpu_torch import factory as torch_factory
from kernloom_gpu_torch import plugin as torch_plugin
from kernloom_gpu_torch.testing import CpuBoundGPUFactory

# -- the factory on a machine without a usable GPU -------------------------------------------

needs_no_gpu = pytest.mark.skipif(
    torch.cuda.is_available(), reason="this machine has a CUDA GPU: the factory creates devices"
)


@pytest.fixture
def fresh_probe() -> Any:
    torch_factory.import_torch.cache_clear()
    yield
    torch_factory.import_torch.cache_clear()


@needs_no_gpu
def test_cpu_only_torch_creates_no_device_and_says_why() -> None:
    factory = torch_factory.TorchGPUDeviceFactory()
    assert factory.list_physical_devices() == []
    assert factory.create_devices(klp.DeviceOptions()) == []
    reason = factory.unavailable_reason()
    assert reason is not None
    if torch.version.cuda is None:
        assert f"torch {torch.__version__} is a CPU-only build" in reason
        assert "install a CUDA build of PyTorch" in reason
    else:  # a CUDA build on a machine whose GPUs are hidden (the root conftest.py)
        assert "finds no usable GPU" in reason and "CUDA_VISIBLE_DEVICES" in reason


def test_cuda_build_without_a_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    factory = torch_factory.TorchGPUDeviceFactory()
    assert factory.create_devices(klp.DeviceOptions()) == []
    reason = factory.unavailable_reason()
    assert reason is not None and "(CUDA 12.8) finds no usable GPU" in reason
    assert "CUDA_VISIBLE_DEVICES" in reason


def test_a_driver_that_fails_to_initialise(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> bool:
        raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")

    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", broken)
    reason = torch_factory.TorchGPUDeviceFactory().unavailable_reason()
    assert reason is not None and "cannot initialise CUDA" in reason
    assert "driver version is insufficient" in reason


def test_without_torch_the_plugin_loads_and_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, fresh_probe: None
) -> None:
    real = importlib.import_module

    def no_torch(name: str, package: str | None = None) -> Any:
        if name == "torch":
            raise ImportError("No module named 'torch'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_torch)
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(torch_plugin, name="gpu_torch")
    assert registry.failures == ()
    assert not [
        r
        for r in registry.kernels.kernels()
        if r.kernel_def.device_type == "GPU" and r.origin.plugin != "kernloom"
    ]
    devices = registry.create_devices()
    assert [d.device_type for d in devices] == ["CPU"]
    gpu = next(r for r in registry.resolve_factories() if r.registration.device_type == "GPU")
    reason = gpu.registration.factory.unavailable_reason()
    assert reason is not None
    assert "torch cannot be imported (ImportError: No module named 'torch')" in reason


# -- the device contract on a CPU-bound torch device -------------------------------------------


@pytest.fixture
def device() -> Any:
    (gpu,) = CpuBoundGPUFactory().create_devices(klp.DeviceOptions())
    return gpu


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array(2.5),
        np.array([True, False]),
        np.arange(12, dtype=np.int64).reshape(3, 4).T,  # not contiguous
        np.array([1 + 2j, 3 - 1j], np.complex64),
        np.zeros((0, 4), np.float16),
    ],
    ids=["f32", "0-d", "bool", "strided", "c64", "empty"],
)
def test_copies_round_trip_through_separate_memory(device: Any, array: Any) -> None:
    on_device = device.copy_from_host(array)
    assert isinstance(on_device, torch.Tensor)
    assert tuple(on_device.shape) == array.shape
    back = device.copy_to_host(on_device)
    np.testing.assert_array_equal(back, array)
    assert back.dtype == array.dtype
    if array.size:
        assert not np.shares_memory(back, array)
        back.reshape(-1)[0] = 0  # the host copy is the caller's own
        assert device.copy_to_host(on_device).reshape(-1)[0] == array.reshape(-1)[0]


def test_read_only_feeds_copy_without_a_warning(device: Any) -> None:
    fed = np.ones(4, np.float32)
    view = fed.view()
    view.flags.writeable = False
    np.testing.assert_array_equal(device.copy_to_host(device.copy_from_host(view)), fed)


def test_a_dtype_torch_cannot_compute_with_is_refused_by_name(device: Any) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=r"cannot copy a uint32 array to .*GPU:0"):
        device.copy_from_host(np.ones(3, np.uint32))


def test_a_feed_is_allocated_on_the_stream_that_reads_it(
    device: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's caching allocator orders a block's reuse by the stream it was allocated on:
    a feed copied in on the device's stream must be allocated there too."""
    inside = []
    scope = device._stream_scope

    @contextlib.contextmanager
    def stream_scope() -> Iterator[None]:
        inside.append(True)
        with scope():
            yield
        inside.pop()

    allocate = device._allocate
    seen: list[bool] = []

    def recording_allocate(shape: Any, dtype: Any) -> Any:
        seen.append(bool(inside))
        return allocate(shape, dtype)

    monkeypatch.setattr(device, "_stream_scope", stream_scope)
    monkeypatch.setattr(device, "_allocate", recording_allocate)
    device.copy_from_host(np.ones(3, np.float32))
    assert seen == [True]


def test_allocations_are_counted_until_freed(device: Any) -> None:
    before = device.memory_stats().bytes_in_use
    buffer = device.allocate((256, 4), kl.float32)
    assert buffer.dtype is torch.float32 and tuple(buffer.shape) == (256, 4)
    assert device.memory_stats().bytes_in_use == before + 4096
    del buffer
    assert device.memory_stats().bytes_in_use == before


def test_direct_copy_between_torch_devices() -> None:
    first, second = CpuBoundGPUFactory(count=2).create_devices(klp.DeviceOptions())
    value = first.copy_from_host(np.arange(5.0))
    moved = second.copy_from_device(first, value)
    assert moved is not None and moved.data_ptr() != value.data_ptr()
    np.testing.assert_array_equal(second.copy_to_host(moved), np.arange(5.0))


# -- sessions: placement, copies, variables, loops ---------------------------------------------

REGISTRY = torch_registry()


def mlp(batch: int) -> tuple[kl.Graph, kl.Tensor, kl.Tensor, dict[str, np.ndarray[Any, Any]]]:
    rng = np.random.default_rng(7)
    params = {
        "w1": rng.standard_normal((20, 16)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(16).astype(np.float32),
        "w2": rng.standard_normal((16, 5)).astype(np.float32) * 0.3,
        "b2": rng.standard_normal(5).astype(np.float32),
    }
    graph = kl.Graph(REGISTRY)
    with graph.as_default():
        x = kl.placeholder(kl.float32, (batch, 20), name="x")
        h = kl.ops.relu(
            kl.ops.bias_add(kl.ops.mat_mul(x, kl.constant(params["w1"])), kl.constant(params["b1"]))
        )
        logits = kl.ops.bias_add(
            kl.ops.mat_mul(h, kl.constant(params["w2"])), kl.constant(params["b2"])
        )
        probs = kl.ops.softmax(logits, name="probs")
    return graph, x, probs, params


def mlp_reference(x: np.ndarray[Any, Any], p: dict[str, np.ndarray[Any, Any]]) -> Any:
    h = np.maximum(x.astype(np.float64) @ p["w1"] + p["b1"], 0)
    logits = h @ p["w2"] + p["b2"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_a_fully_supported_graph_runs_on_the_gpu_and_moves_only_feeds_and_fetches() -> None:
    graph, x, probs, params = mlp(32)
    feed = np.random.default_rng(1).standard_normal((32, 20)).astype(np.float32)
    metadata = kl.RunMetadata()
    with kl.Session(graph, registry=REGISTRY) as session:
        (out,) = session.run([probs], {x: feed}, run_metadata=metadata)
    np.testing.assert_allclose(out, mlp_reference(feed, params), rtol=1e-5, atol=1e-6)
    assert metadata.placement is not None
    assert set(metadata.placement.values()) == {GPU0}
    assert metadata.bytes_copied == {("client", GPU0): feed.nbytes, (GPU0, "client"): out.nbytes}


def test_unsupported_nodes_go_to_the_cpu_with_counted_copies_between() -> None:
    graph = kl.Graph(REGISTRY)
    with graph.as_default():
        a = kl.placeholder(kl.float32, (4,), name="a")
        doubled = kl.ops.mul(a, kl.constant(np.float32(2)), name="doubled")
        counts = kl.ops.cast(doubled, DstT=kl.uint32, name="counts")
        bumped = kl.ops.add_v2(counts, kl.constant(np.uint32(1)), name="bumped")  # uint32: CPU
        back = kl.ops.cast(bumped, DstT=kl.float32, name="back")
        total = kl.ops.add(back, a, name="total")
    feed = np.array([0.5, 1.0, 2.0, 3.25], np.float32)
    metadata = kl.RunMetadata()
    with kl.Session(graph, registry=REGISTRY) as session:
        (out,) = session.run([total], {a: feed}, run_metadata=metadata)
    expected = ((feed * 2).astype(np.uint32) + 1).astype(np.float32) + feed
    np.testing.assert_array_equal(out, expected)
    placement = metadata.placement
    assert placement is not None
    assert placement["doubled"] == GPU0 and placement["total"] == GPU0
    assert placement["bumped"] == CPU0
    assert metadata.copies[(GPU0, CPU0)] >= 1 and metadata.copies[(CPU0, GPU0)] >= 1
    assert metadata.bytes_copied[(GPU0, CPU0)] >= 16


def test_variables_live_and_update_on_the_gpu() -> None:
    graph = kl.Graph(REGISTRY)
    with graph.as_default():
        v = kl.Variable(np.zeros(3, np.float32), name="v")
        step = v.assign_add(kl.constant(np.array([1.0, 2.0, 3.0], np.float32)))
        init = kl.variables_initializer()
    metadata = kl.RunMetadata()
    with kl.Session(graph, registry=REGISTRY) as session:
        session.run(init)
        for _ in range(3):
            (value,) = session.run([step], run_metadata=metadata)
    np.testing.assert_array_equal(value, [3.0, 6.0, 9.0])
    assert metadata.placement is not None
    assert set(metadata.placement.values()) == {GPU0}
    assert any(name.startswith("v/") for name in metadata.placement)


def test_a_while_loop_runs_on_the_gpu() -> None:
    graph = kl.Graph(REGISTRY)
    with graph.as_default():
        x = kl.placeholder(kl.float64, (3,), name="x")
        i0 = kl.constant(np.float64(0))
        _, result = kl.while_loop(
            lambda i, v: kl.ops.less(i, kl.constant(np.float64(5))),
            lambda i, v: (i + kl.constant(np.float64(1)), v * kl.constant(np.float64(1.5))),
            (i0, x),
        )
    metadata = kl.RunMetadata()
    with kl.Session(graph, registry=REGISTRY) as session:
        (out,) = session.run([result], {x: np.array([1.0, 2.0, -4.0])}, run_metadata=metadata)
    np.testing.assert_allclose(out, np.array([1.0, 2.0, -4.0]) * 1.5**5)
    assert metadata.placement is not None
    assert set(metadata.placement.values()) == {GPU0}


def test_a_torch_kernel_never_runs_on_a_gpu_of_another_backend() -> None:
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(torch_plugin, name="gpu_torch")  # its kernels; no device here
    cupy_like = FakeDeviceFactory("GPU", backend="cupy")
    registry.register_plugin(fake_plugin(("GPU", cupy_like, 210)), name="other_gpu")
    graph = kl.Graph(registry)
    with graph.as_default():
        ones = kl.constant(np.ones(2, np.float32))
        with kl.device("GPU:0"):
            out = kl.ops.tanh(ones, name="squash")
    session = kl.Session(graph, registry=registry)
    with session, pytest.raises(kl.InvalidArgumentError) as caught:
        session.run(out)
    message = str(caught.value)
    assert "'squash'" in message and "Tanh" in message
    assert "needs backend torch, but the GPU device's backend is cupy" in message


def test_torch_gpu_host_memory_inputs_arrive_from_a_gpu_const() -> None:
    """A shape computed on the GPU (Const placed with its consumer) still reaches the
    kernel's host-memory argument."""
    x = np.arange(12, dtype=np.float32)
    values, metadata = run_op(REGISTRY, "Reshape", [x, np.array([3, -1], np.int32)], {})
    np.testing.assert_array_equal(values[0], x.reshape(3, 4))
    assert metadata.placement is not None and metadata.placement["op"] == GPU0


def test_uint16_values_stay_off_the_torch_gpu() -> None:
    """torch holds no usable uint16: the core's Identity, IdentityN and cond kernels, which
    take every dtype, run such values on the CPU (an Identity of uint16 was placed on the
    GPU and its input's copy failed)."""
    registry = torch_registry()
    gpu = next(d for d in registry.create_devices() if d.device_type == "GPU")
    assert not gpu.holds(kl.uint16) and not gpu.holds(kl.uint64) and gpu.holds(kl.float16)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.uint16, [4])
        pred = kl.placeholder(kl.bool_, [])
        fetches = [
            kl.ops.identity(x),
            kl.ops.identity_n([x, kl.constant(np.float32(2))])[0],
            kl.cond(pred, lambda: kl.ops.identity(x), lambda: kl.ops.identity_n([x])[0]),
        ]
    values = np.array([0, 1, 40000, 65535], np.uint16)
    metadata = kl.RunMetadata()
    with kl.Session(g) as session:
        got = session.run(fetches, {x: values, pred: True}, kl.RunOptions(trace=True), metadata)
    for value in got:
        assert value.dtype == np.uint16
        np.testing.assert_array_equal(value, values)
    assert metadata.placement is not None
    on_gpu = {n for n, d in metadata.placement.items() if d == GPU0}
    uint16_nodes = {n.name for n in g.nodes if any(t.dtype == kl.uint16 for t in n.outputs)}
    assert uint16_nodes and not uint16_nodes & on_gpu
