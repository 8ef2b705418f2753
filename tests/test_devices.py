"""Device contract, DeviceMgr lookup and allocation accounting, on the fake accelerator."""

import gc
import threading
from typing import Any

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
from kernloom.framework.allocator import TrackingAllocator
from kernloom.testing import FakeDevice, FakeDeviceFactory


def make_mgr(*counts: tuple[str, int]) -> klp.DeviceMgr:
    devices: list[klp.Device] = []
    for device_type, count in counts:
        devices += FakeDeviceFactory(device_type, count=count).create_devices(klp.DeviceOptions())
    return klp.DeviceMgr(devices)


def test_lookup_by_full_and_partial_names() -> None:
    mgr = make_mgr(("GPU", 2), ("CPU", 1))
    cpu = mgr.devices[2]
    for name in ("CPU", "CPU:0", "/device:CPU:0", "/cpu:0", cpu.name):
        assert mgr.lookup(name) is cpu
    assert mgr.lookup("GPU:1").name.endswith("/device:GPU:1")
    assert [d.spec.device_index for d in mgr.matching("GPU")] == [0, 1]
    assert mgr.device_types() == ["GPU", "CPU"]


def test_lookup_of_an_unknown_device_lists_the_known_ones() -> None:
    mgr = make_mgr(("CPU", 1))
    with pytest.raises(kl.NotFoundError) as info:
        mgr.lookup("CPU:1")
    message = str(info.value)
    assert "'CPU:1'" in message
    assert "/job:localhost/replica:0/task:0/device:CPU:0" in message
    assert "Did you mean 'CPU:0'" in message


def test_an_ambiguous_partial_name_is_an_error_not_a_guess() -> None:
    mgr = make_mgr(("GPU", 2))
    with pytest.raises(kl.InvalidArgumentError, match=r"'GPU' is ambiguous.*GPU:0.*GPU:1"):
        mgr.lookup("GPU")


def test_duplicate_device_names_are_rejected() -> None:
    a = FakeDeviceFactory("CPU").create_devices(klp.DeviceOptions())
    b = FakeDeviceFactory("CPU").create_devices(klp.DeviceOptions())
    with pytest.raises(kl.AlreadyExistsError, match="two devices are named"):
        klp.DeviceMgr(a + b)


def test_close_reaches_every_device() -> None:
    mgr = make_mgr(("GPU", 2))
    mgr.close()
    assert all(isinstance(d, FakeDevice) and d.closed for d in mgr)


def test_attributes_and_names() -> None:
    (device,) = FakeDeviceFactory("APU", memory_limit=1234).create_devices(klp.DeviceOptions())
    assert device.name == "/job:localhost/replica:0/task:0/device:APU:0"
    assert (device.device_type, device.backend) == ("APU", "numpy")
    assert device.attributes.memory_limit == 1234
    with pytest.raises(ValueError, match="must be a full name of type GPU"):
        FakeDevice(
            klp.DeviceAttributes(name="GPU:0", device_type="GPU", backend="x", memory_limit=1)
        )


def test_copies_cross_the_device_boundary() -> None:
    (device,) = FakeDeviceFactory("GPU").create_devices(klp.DeviceOptions())
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    value = device.copy_from_host(host)
    host[0, 0] = 100  # the device holds its own copy
    back = device.copy_to_host(value)
    np.testing.assert_array_equal(back, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert device.value_shape(value) == kl.TensorShape([2, 3])
    assert device.copy_from_device(device, value) is None  # no direct path by default


def test_allocator_counts_live_buffers_only() -> None:
    (device,) = FakeDeviceFactory("GPU").create_devices(klp.DeviceOptions())
    a = device.allocate([1000], kl.float32)
    b = device.allocate([10, 10], "float64")
    stats = device.memory_stats()
    assert stats.bytes_in_use == 4000 + 800 and stats.num_allocs == 2
    assert stats.largest_alloc_size == 4000
    del a
    gc.collect()
    assert device.memory_stats().bytes_in_use == 800
    assert device.memory_stats().peak_bytes_in_use == 4800
    device.reset_peak_memory()
    assert device.memory_stats().peak_bytes_in_use == 800
    view = b[1:]
    del b
    gc.collect()  # a view keeps its base buffer alive, and so its bytes in use
    assert device.memory_stats().bytes_in_use == 800
    del view
    gc.collect()
    assert device.memory_stats().bytes_in_use == 0


def test_memory_limit_is_enforced_with_a_message_naming_the_device() -> None:
    options = klp.DeviceOptions(memory_limit={"GPU": 1000})
    (device,) = FakeDeviceFactory("GPU").create_devices(options)
    keep = device.allocate([200], kl.float32)  # 800 bytes
    with pytest.raises(kl.ResourceExhaustedError) as info:
        device.allocate([100], kl.float32)
    message = str(info.value)
    assert "device:GPU:0" in message and "400 bytes" in message and "800 of 1000" in message
    assert device.memory_stats().bytes_in_use == 800  # the failed request left nothing behind
    del keep


def test_allocator_is_thread_safe() -> None:
    allocator = TrackingAllocator("test", None)
    keep: list[object] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(200):
            buf = allocator.allocate(8, lambda: np.empty(1))
            with lock:
                keep.append(buf)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert allocator.stats().bytes_in_use == 8 * 800 and allocator.stats().num_allocs == 800
    keep.clear()
    gc.collect()
    assert allocator.stats().bytes_in_use == 0


def test_a_buffer_collected_while_its_allocator_counts_does_not_deadlock() -> None:
    # A garbage collection can run anywhere -- within the allocator's own locked section
    # too -- and free a counted buffer there: its finalizer must not wait for that lock.
    allocator = TrackingAllocator("test", 64)
    finished = threading.Event()

    def collect_under_the_lock() -> None:
        buf = allocator.allocate(48, lambda: np.empty(12, np.float32))
        with allocator._lock:  # as if collected in the middle of another allocation
            del buf
        finished.set()

    worker = threading.Thread(target=collect_under_the_lock, daemon=True)
    worker.start()
    assert finished.wait(10), "the finalizer waited for the allocator's lock"
    assert allocator.stats().bytes_in_use == 0
    allocator.allocate(64, lambda: np.empty(16, np.float32))  # the freed bytes count as free


def test_options_limit_device_count() -> None:
    factory = FakeDeviceFactory("GPU", count=3)
    assert len(factory.create_devices(klp.DeviceOptions(device_count={"GPU": 1}))) == 1
    assert factory.create_devices(klp.DeviceOptions(device_count={"GPU": 0})) == []
    with pytest.raises(ValueError, match="intra_op_threads"):
        klp.DeviceOptions(intra_op_threads=0)


# -- a device plugin whose own code fails -----------------------------------------------------


def _faulty_accel_registry(fault: str) -> klp.Registry:
    """The numpy CPU plugin and a FAKE_ACCEL plugin ('acme_dev') whose device's
    ``copy_from_host`` (fault 'from') or ``copy_to_host`` ('to') raises, or whose
    allocator returns buffers of half the size asked for ('shape') or of another dtype
    ('dtype'); whose ``copy_to_host`` returns a list ('to_list'), a flattened array
    ('to_flat'), a float64 array ('to_float64') or the device's own memory, no copy
    ('to_own_buffer': a unified-memory device); or whose ``copy_from_host`` returns a list
    ('from_list'). Any other fault: a correct device. Its kernels include a ``Shape``
    whose output is in host memory, as on the GPU plugins."""
    from kernloom.testing.fake_accelerator import (
        FAKE_ACCEL,
        AccelArray,
        FakeAccelDevice,
        build_library,
    )
    from kernloom_cpu_numpy import plugin as cpu_plugin

    class Device(FakeAccelDevice):
        def _allocate(self, shape: tuple[int, ...], dtype: klp.DType) -> AccelArray:
            if fault == "shape":
                return AccelArray(np.zeros((max(1, int(np.prod(shape)) // 2),), dtype.numpy_dtype))
            if fault == "dtype":
                return AccelArray(np.zeros(shape, np.float64))
            return super()._allocate(shape, dtype)

        def copy_from_host(self, array: np.ndarray) -> Any:
            if fault == "from":
                raise RuntimeError("DMA engine timed out")
            if fault == "from_list":
                return np.asarray(array).tolist()
            return super().copy_from_host(array)

        def copy_to_host(self, value: AccelArray) -> Any:
            if fault == "to":
                raise RuntimeError("DMA engine timed out")
            if fault == "to_own_buffer" and isinstance(value, AccelArray):
                return value.data  # host-visible device memory, handed out as it is
            host = super().copy_to_host(value)
            if fault == "to_list":
                return host.tolist()
            if fault == "to_flat":
                return host.reshape(-1)
            if fault == "to_float64":
                return host.astype(np.float64)
            return host

    library = build_library()

    @library.kernel("Shape", device=FAKE_ACCEL, backend="fake", host_memory=["output"])
    def shape(ctx: klp.OpKernelContext) -> None:
        dtype = ctx.signature.output_dtypes[0].numpy_dtype
        ctx.set_output(0, np.asarray(ctx.device.value_shape(ctx.input(0)).as_list(), dtype))

    class Plugin:
        KERNLOOM_API = ">=1.0,<2"

        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            factory = FakeDeviceFactory(FAKE_ACCEL, count=1, backend="fake", device_class=Device)
            registry.register_device_factory(FAKE_ACCEL, factory, priority=150)
            registry.register_kernels(library)

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(Plugin(), name="acme_dev")
    return registry


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("fault", "what", "call"),
    [
        ("from", "feed 'x:0'", "copy_from_host"),
        ("shape", "feed 'x:0'", "copy_from_host"),
        ("to", "fetch 'y:0'", "copy_to_host"),
    ],
)
def test_a_device_copy_that_fails_is_the_device_plugins_error(
    fault: str, what: str, call: str, threads: int
) -> None:
    """A feed or fetch copy the device's own code fails is a DeviceError naming the feed or
    fetch, the device and its plugin, and saying whose fault it is; the device's exception
    is its cause (not a bare RuntimeError or ValueError from inside the session)."""
    g = kl.Graph(_faulty_accel_registry(fault))
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        with kl.device("/device:FAKE_ACCEL:0"):
            y = kl.ops.relu(x, name="y")
    config = kl.SessionConfig(inter_op_threads=threads)
    with kl.Session(g, config) as sess, pytest.raises(kl.DeviceError) as info:
        sess.run(y, {x: np.ones((2, 3), np.float32)})
    message = str(info.value)
    assert message.startswith(f"{what}: ")
    assert "/job:localhost/replica:0/task:0/device:FAKE_ACCEL:0" in message
    assert f"{call} of plugin 'acme_dev'" in message
    assert "a fault of the device plugin" in message
    assert isinstance(info.value.__cause__, RuntimeError | ValueError)


def test_an_allocator_that_returns_another_dtype_is_blamed() -> None:
    """A kernel's output of the wrong dtype, because the device's allocator gave one: the
    device's plugin is blamed, not the kernel."""
    g = kl.Graph(_faulty_accel_registry("dtype"))
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        with kl.device("/device:FAKE_ACCEL:0"):
            y = kl.ops.relu(x, name="y")
    with kl.Session(g) as sess, pytest.raises(kl.DeviceError) as info:
        sess.run(y, {x: np.ones((2, 3), np.float32)})
    message = str(info.value)
    assert message.startswith("node 'y' (op Relu) on /job:localhost/replica:0/task:0/device:")
    assert (
        "the device's allocator (plugin 'acme_dev') returned a float64 buffer for a "
        "float32 allocation" in message
    )
    assert "a fault of the device plugin" in message


def test_a_const_whose_copy_onto_the_device_fails_names_the_device_s_plugin() -> None:
    """A Const's value goes onto its device when its kernel is built: a device whose
    copy_from_host raises there is named with its plugin (the core's Const kernel is not
    at fault), and with the node and device."""
    g = kl.Graph(_faulty_accel_registry("from"))
    with g.as_default(), kl.device("/device:FAKE_ACCEL:0"):
        c = kl.constant(np.ones((2, 3), np.float32), name="c")
        y = kl.ops.relu(c, name="y")
    config = kl.SessionConfig(graph_optimizer=False)  # (no folding of the Const away)
    with kl.Session(g, config) as sess, pytest.raises(kl.KernelError) as info:
        sess.run(y)
    message = str(info.value)
    assert message.startswith("node 'c' (op Const): constructing kernel ")
    assert "device:FAKE_ACCEL:0 (of plugin 'acme_dev')" in message
    assert "RuntimeError: DMA engine timed out" in message


ACCEL0 = "/job:localhost/replica:0/task:0/device:FAKE_ACCEL:0"
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("metadata", [False, True])
@pytest.mark.parametrize("shape", [[2, 3], [None, 3]])
@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        ("to_list", "returned list [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], not a numpy array"),
        ("to_flat", "returned an array of shape (6,) for a value whose value_shape is (2, 3)"),
        ("to_float64", "returned a float64 array for a float32 value"),
    ],
    ids=["to_list", "to_flat", "to_float64"],
)
def test_a_fetch_copy_that_returns_something_else_is_the_device_plugins_error(
    fault: str, problem: str, shape: list[int | None], metadata: bool, threads: int
) -> None:
    """A copy_to_host that returns a list, or an array of another shape or dtype, is a
    DeviceError naming the fetch, the device, its plugin and what it returned -- not a
    float64 or flattened array handed to the caller, nor an AttributeError from inside
    the session (with run_metadata, which counts the bytes copied)."""
    g = kl.Graph(_faulty_accel_registry(fault))
    with g.as_default():
        x = kl.placeholder(kl.float32, shape, name="x")
        with kl.device("/device:FAKE_ACCEL:0"):
            y = kl.ops.relu(x, name="y")
    run_metadata = kl.RunMetadata() if metadata else None
    config = kl.SessionConfig(inter_op_threads=threads)
    with kl.Session(g, config) as sess, pytest.raises(kl.DeviceError) as info:
        sess.run(y, {x: np.ones((2, 3), np.float32)}, run_metadata=run_metadata)
    message = str(info.value)
    assert message.startswith(f"fetch 'y:0': copying it off {ACCEL0} failed: ")
    assert f"the device's copy_to_host of plugin 'acme_dev' {problem}. " in message
    assert "a fault of the device plugin" in message


@pytest.mark.parametrize("threads", [1, 2])
def test_a_host_memory_output_of_an_accelerator_node_is_fetched_as_it_is(threads: int) -> None:
    """A Shape on the accelerator gives its output in host memory (host_memory=["output"]);
    fetching it takes that numpy array as it is -- the device's copy_to_host, which takes
    only its own buffers, is not asked, and no device-to-client copy is counted -- as
    when the value goes to a CPU node through _Send."""
    g = kl.Graph(_faulty_accel_registry("none"))
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        with kl.device("/device:FAKE_ACCEL:0"):
            s = kl.ops.shape(x, name="s")
        with kl.device("/device:CPU:0"):
            s_on_cpu = kl.ops.identity(s, name="s_on_cpu")
    metadata = kl.RunMetadata()
    config = kl.SessionConfig(inter_op_threads=threads)
    with kl.Session(g, config) as sess:
        fetched = sess.run(s, {x: np.zeros((2, 3), np.float32)}, run_metadata=metadata)
        through_cpu = sess.run(s_on_cpu, {x: np.zeros((2, 3), np.float32)})
        fetched[0] = 7  # the caller's own array
        again = sess.run(s, {x: np.zeros((5, 3), np.float32)})
    assert metadata.placement["s"] == ACCEL0
    assert fetched.dtype == np.int32 and again.dtype == np.int32
    np.testing.assert_array_equal(through_cpu, [2, 3])
    np.testing.assert_array_equal(again, [5, 3])
    assert (ACCEL0, "client") not in metadata.copies


@pytest.mark.parametrize("threads", [1, 2])
def test_a_device_that_hands_out_its_own_memory_never_gives_away_the_sessions_state(
    threads: int,
) -> None:
    """A unified-memory style device whose copy_to_host returns its buffer's own memory:
    every fetch is still an independent, writeable array the caller owns (issue 19).
    Writing into a fetched Const (or a result) changes no later run."""
    g = kl.Graph(_faulty_accel_registry("to_own_buffer"))
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        with kl.device("/device:FAKE_ACCEL:0"):
            c = kl.constant(np.array([1, 2, 3], np.float32), name="c")
            y = kl.ops.mul(x, c, name="y")
    ones = np.ones(3, np.float32)
    config = kl.SessionConfig(inter_op_threads=threads)
    with kl.Session(g, config) as sess:
        fetched_c, fetched_y = sess.run([c, y], {x: ones})
        assert fetched_c.flags.writeable and fetched_y.flags.writeable
        fetched_c[...] = -7
        fetched_y[...] = -7
        np.testing.assert_array_equal(sess.run(c), [1, 2, 3])
        np.testing.assert_array_equal(sess.run(y, {x: ones}), [1, 2, 3])
        first, second = sess.run(c), sess.run(c)
    assert not np.shares_memory(first, second)


def _crossing_graph(fault: str) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    """x -> h (CPU) -> y (FAKE_ACCEL) -> z (CPU): h crosses onto the accelerator, y off it."""
    g = kl.Graph(_faulty_accel_registry(fault))
    with g.as_default():
        with kl.device("/device:CPU:0"):
            x = kl.placeholder(kl.float32, [2, 3], name="x")
            h = kl.ops.neg(x, name="h")
        with kl.device("/device:FAKE_ACCEL:0"):
            y = kl.ops.relu(h, name="y")
        with kl.device("/device:CPU:0"):
            z = kl.ops.neg(y, name="z")
    return g, x, z


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("fault", "crossing", "call", "problem"),
    [
        (
            "to",
            f"'y:0' sent from {ACCEL0} to {CPU0}: copying it off {ACCEL0}",
            "copy_to_host",
            "raised RuntimeError: DMA engine timed out",
        ),
        (
            "to_list",
            f"'y:0' sent from {ACCEL0} to {CPU0}: copying it off {ACCEL0}",
            "copy_to_host",
            "returned list [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], not a numpy array",
        ),
        (
            "to_float64",
            f"'y:0' sent from {ACCEL0} to {CPU0}: copying it off {ACCEL0}",
            "copy_to_host",
            "returned a float64 array for a float32 value",
        ),
        (
            "to_flat",
            f"'y:0' sent from {ACCEL0} to {CPU0}: copying it off {ACCEL0}",
            "copy_to_host",
            "returned an array of shape (6,) for a value whose value_shape is (2, 3)",
        ),
        (
            "from",
            f"'h:0' sent from {CPU0} to {ACCEL0}: copying it onto {ACCEL0}",
            "copy_from_host",
            "raised RuntimeError: DMA engine timed out",
        ),
        (
            "from_list",
            f"'h:0' sent from {CPU0} to {ACCEL0}: copying it onto {ACCEL0}",
            "copy_from_host",
            "returned list [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]], not an array",
        ),
    ],
    ids=["to", "to_list", "to_float64", "to_flat", "from", "from_list"],
)
def test_a_device_copy_between_devices_that_fails_is_the_device_plugins_error(
    fault: str, crossing: str, call: str, problem: str, threads: int
) -> None:
    """A value crossing between devices (_Send/_Recv) whose copy the device's own code
    fails -- raises, or returns a list or an array of another dtype or shape -- is a
    DeviceError naming the tensor, both devices, the call and the device's plugin, as for
    a feed or a fetch: not a KernelError of the internal _Recv node, nor one blaming the
    core's RecvKernel."""
    g, x, z = _crossing_graph(fault)
    config = kl.SessionConfig(inter_op_threads=threads)
    with kl.Session(g, config) as sess, pytest.raises(kl.DeviceError) as info:
        sess.run(z, {x: np.ones((2, 3), np.float32)})
    message = str(info.value)
    assert message.startswith(f"value {crossing} failed: ")
    assert f"the device's {call} of plugin 'acme_dev' {problem}. " in message
    assert "a fault of the device plugin" in message
    assert "_recv" not in message and "RecvKernel" not in message
    assert not isinstance(info.value, kl.KernelError)
    if fault in ("to", "from"):
        assert isinstance(info.value.__cause__, RuntimeError)


def test_a_correct_device_crosses_both_ways() -> None:
    """The same graph on a correct device: the checks of each copy pass what they should."""
    g, x, z = _crossing_graph("none")
    value = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    metadata = kl.RunMetadata()
    with kl.Session(g) as sess:
        result = sess.run(z, {x: value}, run_metadata=metadata)
    np.testing.assert_array_equal(result, -np.maximum(-value, 0))
    assert metadata.copies[(CPU0, ACCEL0)] == 1 and metadata.copies[(ACCEL0, CPU0)] == 1
