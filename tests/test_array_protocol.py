"""The array protocol on ``Device``: a device whose buffers are a class the core has never
seen (FAKE_ACCEL's ``AccelArray``: no ``nbytes``, no ``__array__``) gets buffer forwarding,
memory accounting and counted copies through a real session, as numpy's do; a device whose
buffers happen to be numpy arrays but are not host memory has its values copied (and
counted) whenever they cross to the host; and a kernel output that is no array of the
declared dtype is an error that blames the kernel and its plugin."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import AccelArray, FakeDevice, FakeDeviceFactory

ACCEL = "/job:localhost/replica:0/task:0/device:FAKE_ACCEL:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
FAKE = "/job:localhost/replica:0/task:0/device:FAKE:0"
N = 256  # float32 elements: 1 KiB per buffer


def relu_chain(registry: klp.Registry, length: int) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    g = kl.Graph(registry)
    with g.as_default(), kl.device("FAKE_ACCEL"):
        x = kl.placeholder(kl.float32, [N], name="x")
        y = x
        for i in range(length):
            y = kl.ops.relu(y, name=f"r{i}")
    return g, x, y


@pytest.mark.parametrize("trace", [False, True], ids=["straight-line", "general"])
def test_accelerator_buffers_are_forwarded_and_accounted(trace: bool) -> None:
    registry = make_registry(accel=True)
    g, x, y = relu_chain(registry, 4)
    feed = np.linspace(-1.0, 1.0, N, dtype=np.float32)
    md = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        out = sess.run(y, {x: feed}, kl.RunOptions(trace=trace), run_metadata=md)
        after = sess.devices.lookup("FAKE_ACCEL").memory_stats()
    np.testing.assert_array_equal(out, np.maximum(feed, 0))
    memory = md.memory[ACCEL]
    nbytes = N * 4
    # The fed copy stays held by the step; r0 allocates; r1..r3 overwrite r0's buffer.
    # Without forwarding r1 would allocate while r0 is alive: three buffers at the peak.
    assert memory.peak_bytes_in_use == 2 * nbytes
    assert memory.num_allocs == 2
    assert after.bytes_in_use == 0  # every AccelArray was collected after the step
    if trace:
        assert md.step_stats is not None
        forwarded = {s.node: s.forwarded for s in md.step_stats.nodes}
        assert forwarded["r0"] == ()  # its input is the fed value, still held by the step
        assert forwarded["r1"] == forwarded["r2"] == forwarded["r3"] == ((0, 0),)
        assert md.step_stats.for_node("r3").output_bytes == nbytes


def test_a_held_accelerator_buffer_is_not_overwritten() -> None:
    registry = make_registry(accel=True)
    g = kl.Graph(registry)
    with g.as_default(), kl.device("FAKE_ACCEL"):
        x = kl.placeholder(kl.float32, [N], name="x")
        a = kl.ops.relu(x, name="a")
        b = kl.ops.relu(a, name="b")  # a is fetched too: b must not write into it
    feed = -np.ones(N, np.float32)
    with kl.Session(g) as sess:
        got_a, got_b = sess.run([a, b], {x: feed})
    np.testing.assert_array_equal(got_a, np.zeros(N))
    np.testing.assert_array_equal(got_b, np.zeros(N))


def test_copies_of_accelerator_buffers_are_counted_with_their_bytes() -> None:
    registry = make_registry(accel=True)
    g = kl.Graph(registry)
    with g.as_default():
        with kl.device("CPU"):
            x = kl.placeholder(kl.float32, [N], name="x")
            twice = kl.ops.add(x, x, name="twice")
        with kl.device("FAKE_ACCEL"):
            r = kl.ops.relu(twice, name="r")
        with kl.device("CPU"):
            y = kl.ops.neg(r, name="y")
    feed = np.linspace(-1.0, 1.0, N, dtype=np.float32)
    md = kl.RunMetadata()
    with kl.Session(g) as sess:
        out = sess.run(y, {x: feed}, run_metadata=md)
        accel = sess.devices.lookup("FAKE_ACCEL")
    np.testing.assert_array_equal(out, -np.maximum(2 * feed, 0))
    assert md.copies == {(CPU, ACCEL): 1, (ACCEL, CPU): 1}
    # AccelArray has no nbytes: only its device can say what moved.
    assert md.bytes_copied == {(CPU, ACCEL): N * 4, (ACCEL, CPU): N * 4}
    assert isinstance(accel, kl.testing.FakeAccelDevice)
    assert accel.copies_to_device == 1 and accel.copies_to_host == 1


def test_the_device_answers_the_array_protocol_for_its_own_type() -> None:
    registry = make_registry(accel=True)
    accel = registry.create_devices().lookup("FAKE_ACCEL")
    value = accel.copy_from_host(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert isinstance(value, AccelArray) and not hasattr(value, "nbytes")
    assert accel.is_device_value(value) and not accel.is_host_value(value)
    assert accel.is_host_value(np.zeros(2))  # a host-memory output, such as a shape
    assert accel.value_dtype(value) is kl.int32
    assert accel.value_shape(value) == kl.TensorShape([2, 3])
    assert accel.value_nbytes(value) == 24
    assert accel.may_overwrite(value)
    assert accel.forward_buffer(value, kl.int32, (2, 3)) is value
    assert accel.forward_buffer(value, kl.float32, (2, 3)) is None  # dtype differs
    assert accel.forward_buffer(value, kl.int32, (3, 3)) is None  # size differs
    assert accel.output_dtype([1, 2]) is None and accel.output_dtype(None) is None


# -- a device whose buffers are numpy arrays but not host memory (issue 17) --------------


def fake_plugin_with_kernels() -> object:
    """FAKE devices (numpy buffers behind a copying boundary) with the device-independent
    kernels and the variable kernels: nothing numpy-specific is registered for them."""
    factory = FakeDeviceFactory("FAKE")

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_device_factory("FAKE", factory, priority=10)
            lib = klp.KernelLibrary()
            klp.register_device_independent_kernels(lib, "FAKE")
            klp.register_variable_kernels(lib, "FAKE")
            registry.register_kernels(lib)

    return Plugin()


def fake_registry() -> klp.Registry:
    registry = make_registry()
    registry.register_plugin(fake_plugin_with_kernels(), name="fake_numpy")
    return registry


def test_send_copies_a_numpy_backed_device_value_and_counts_it() -> None:
    g = kl.Graph(fake_registry())
    with g.as_default():
        with kl.device("CPU"):
            x = kl.placeholder(kl.float32, [N], name="x")
            twice = kl.ops.add(x, x, name="twice")
        with kl.device("FAKE"):
            moved = kl.ops.identity(twice, name="moved")
        with kl.device("CPU"):
            y = kl.ops.neg(moved, name="y")
    feed = np.arange(N, dtype=np.float32)
    md = kl.RunMetadata()
    with kl.Session(g) as sess:
        out = sess.run(y, {x: feed}, run_metadata=md)
        fake = sess.devices.lookup("FAKE")
    np.testing.assert_array_equal(out, -2 * feed)
    assert md.placement is not None and md.placement["moved"] == FAKE
    # The value on FAKE is a numpy array, yet FAKE's memory is not the host's: it is
    # copied off the device through copy_to_host and counted, both ways.
    assert md.copies == {(CPU, FAKE): 1, (FAKE, CPU): 1}
    assert md.bytes_copied == {(CPU, FAKE): N * 4, (FAKE, CPU): N * 4}
    assert isinstance(fake, FakeDevice) and fake.copies_in == 1 and fake.copies_out == 1


def accel_registry_with_variables() -> klp.Registry:
    """FAKE_ACCEL with the core's variable kernels: AccelArray values are copied and
    added by the device's own ``copy_value``/``update_value``."""

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()
            klp.register_variable_kernels(lib, "FAKE_ACCEL", backend="fake")
            registry.register_kernels(lib)

    registry = make_registry(accel=True)
    registry.register_plugin(Plugin(), name="accel_variables")
    return registry


@pytest.mark.parametrize("device_type", ["FAKE", "FAKE_ACCEL"])
def test_variables_run_on_any_device_through_its_protocol(device_type: str) -> None:
    registry = fake_registry() if device_type == "FAKE" else accel_registry_with_variables()
    g = kl.Graph(registry)
    with g.as_default(), kl.device(device_type):
        v = kl.Variable(np.array([1, 2, 3], np.int32), name="v")
        bumped = v.assign_add(np.array([10, 20, 2**31 - 1], np.int32))
        lowered = v.assign_sub(np.array([1, 1, 1], np.int32))
    md = kl.RunMetadata()
    with kl.Session(g) as sess:
        sess.run(v.initializer)
        got = sess.run(bumped)
        again = sess.run(v.value(), run_metadata=md)
        down = sess.run(lowered)
    expected = np.array([11, 22, -(2**31) + 2], np.int32)  # int32 wraps, as TensorFlow's
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(again, expected)
    np.testing.assert_array_equal(down, expected - 1)
    assert md.placement is not None
    assert md.placement[v.name].endswith(f"{device_type}:0")


# -- kernel outputs that are not arrays of the declared dtype (issue 19) -----------------


BAD_OUTPUTS: dict[str, Any] = {
    "list": [1.0, 2.0],
    "float": 1.5,
    "none": None,
    "float64": np.zeros(2, np.float64),
}


def bad_plugin(kind: str, *, direct: bool) -> object:
    def compute(ctx: klp.OpKernelContext) -> None:
        ctx.set_output(0, BAD_OUTPUTS[kind])

    def entry(reuse: int, x: Any) -> Any:
        return BAD_OUTPUTS[kind]

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()
            lib.kernel(
                "Relu",
                device="CPU",
                label="bad",
                type_constraints={"T": [kl.float32]},
                direct=entry if direct else None,
            )(compute)
            registry.register_kernels(lib)

    return Plugin()


@pytest.mark.parametrize("direct", [False, True], ids=["compute", "direct"])
@pytest.mark.parametrize("trace", [False, True], ids=["straight-line", "general"])
@pytest.mark.parametrize("kind", sorted(BAD_OUTPUTS))
def test_an_output_that_is_no_array_of_the_declared_dtype_blames_the_kernel(
    kind: str, trace: bool, direct: bool
) -> None:
    registry = make_registry()
    registry.register_plugin(
        bad_plugin(kind, direct=direct), name="bad_kernels", distribution="acme-bad", version="1.0"
    )
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        with kl.kernel_label("bad"):
            y = kl.ops.relu(x, name="culprit")
    with (
        kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess,
        pytest.raises(kl.KernelError) as caught,
    ):
        sess.run(y, {x: np.ones(2, np.float32)}, kl.RunOptions(trace=trace))
    message = str(caught.value)
    # the plugin's fault, not the caller's bad argument; on the device it ran on
    assert type(caught.value) is kl.KernelError
    assert "node 'culprit' (op Relu) on /job:localhost/replica:0/task:0/device:CPU:0: " in message
    # the kernel, and the plugin and distribution that registered it
    assert "bad_plugin.<locals>.compute registered by plugin 'bad_kernels' (acme-bad 1.0)" in (
        message
    )
    assert "dead" not in message
    if kind == "float64":
        assert "with dtype float64, but the op declares float32" in message
    else:
        assert f"as a {type(BAD_OUTPUTS[kind]).__name__}" in message


# -- a host-memory output read in device memory (TensorFlow's memory-type pass) ------------


def accel_registry_with_shape_arithmetic() -> klp.Registry:
    """FAKE_ACCEL with a ``Shape`` whose output is in host memory (as on a real GPU) and an
    int32 ``Add`` that reads both inputs in accelerator memory and refuses anything else."""

    def shape(ctx: klp.OpKernelContext) -> None:
        ctx.allocate_output(0, (len(ctx.input(0).shape),))[...] = ctx.input(0).shape

    def add(ctx: klp.OpKernelContext) -> None:
        a, b = ctx.input(0), ctx.input(1)
        for i, value in enumerate((a, b)):
            if not isinstance(value, AccelArray):
                raise ctx.fail(f"input {i} is a {type(value).__name__}, not accelerator memory")
        ctx.allocate_output(0, a.shape).data[...] = a.data + b.data

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()
            int32 = {"T": (kl.int32,)}
            lib.kernel("Shape", device="FAKE_ACCEL", backend="fake", host_memory=["output"])(shape)
            lib.kernel("Add", device="FAKE_ACCEL", backend="fake", type_constraints=int32)(add)
            registry.register_kernels(lib)

    registry = make_registry(accel=True)
    registry.register_plugin(Plugin(), name="accel_shapes")
    return registry


@pytest.mark.parametrize("trace", [False, True], ids=["straight-line", "general"])
def test_a_host_memory_output_is_copied_to_the_device_for_a_kernel_that_reads_it_there(
    trace: bool,
) -> None:
    """A shape computed on the accelerator stays in host memory; an Add on the same device
    reads it in device memory: the runtime copies it there (directly, and through an
    Identity that hands the host value on), as a Neg of an ONNX model's computed slice
    bounds needs on a real GPU."""
    g = kl.Graph(accel_registry_with_shape_arithmetic())
    with g.as_default(), kl.device("FAKE_ACCEL"):
        x = kl.placeholder(kl.float32, [2, 3, 5], name="x")
        s = kl.ops.shape(x, name="s")
        y = kl.ops.add(kl.ops.identity(s, name="i"), s, name="y")
    md = kl.RunMetadata()
    with kl.Session(g) as sess:
        got = sess.run(y, {x: np.zeros((2, 3, 5), np.float32)}, kl.RunOptions(trace=trace), md)
    np.testing.assert_array_equal(got, [4, 6, 10])
    assert md.placement is not None and md.placement["y"] == ACCEL
