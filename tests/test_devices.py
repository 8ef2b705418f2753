"""Device contract, DeviceMgr lookup and allocation accounting, on the fake accelerator."""

import gc
import threading

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
    ('dtype')."""
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

        def copy_from_host(self, array: np.ndarray) -> AccelArray:
            if fault == "from":
                raise RuntimeError("DMA engine timed out")
            return super().copy_from_host(array)

        def copy_to_host(self, value: AccelArray) -> np.ndarray:
            if fault == "to":
                raise RuntimeError("DMA engine timed out")
            return super().copy_to_host(value)

    class Plugin:
        KERNLOOM_API = ">=1.0,<2"

        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            factory = FakeDeviceFactory(FAKE_ACCEL, count=1, backend="fake", device_class=Device)
            registry.register_device_factory(FAKE_ACCEL, factory, priority=150)
            registry.register_kernels(build_library())

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
