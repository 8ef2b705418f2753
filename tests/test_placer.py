"""Placement across CPU and the fake accelerator: priorities, labels, requests, soft
placement, colocation, generator and metadata rules, and the explanations."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
from kernloom.framework.kernel_registry import run_compute
from kernloom.framework.node_def import KERNEL_LABEL_ATTR, NodeDef
from kernloom.runtime.placer import Placement, Placer
from kernloom.testing import (
    FAKE_ACCEL,
    AccelArray,
    FakeAccelDevice,
    FakeDevice,
    FakeDeviceFactory,
    fake_plugin,
)

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
ACCEL0 = "/job:localhost/replica:0/task:0/device:FAKE_ACCEL:0"


@pytest.fixture(scope="module")
def registry(accel_registry: klp.Registry) -> klp.Registry:
    return accel_registry


@pytest.fixture
def g(registry: klp.Registry) -> kl.Graph:
    graph = kl.Graph(registry)
    with graph.as_default():
        yield graph  # type: ignore[misc]


def place(g: kl.Graph, **kw: bool) -> Placement:
    return Placer(g, g.registry.create_devices(), **kw).run()


def ones(*shape: int) -> kl.Tensor:
    return kl.constant(np.ones(shape, np.float32))


def test_supported_nodes_go_to_the_higher_priority_type(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [None, 3], name="x")
    y = kl.ops.mat_mul(x, ones(3, 2), name="y")
    kl.ops.tanh(y, name="t")
    p = place(g)
    assert g.registry.placement_order() == [FAKE_ACCEL, "CPU"]
    assert (p["x"], p["y"], p["t"]) == (ACCEL0, ACCEL0, CPU0)  # x is fed where y runs
    assert p.decision("y").reason == "highest-priority device type with a kernel for it"
    (accel, cpu) = p.decision("t").candidates
    assert (accel.device_type, accel.supported, accel.reason) == (
        FAKE_ACCEL,
        False,
        "no Tanh kernel for FAKE_ACCEL",
    )
    assert cpu.supported and len(p) == len(g)


def test_a_label_that_exists_on_one_type_decides_the_device(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    with kl.kernel_label("systolic"):
        s = kl.ops.mat_mul(x, x, name="s")
    with kl.kernel_label("einsum"):
        e = kl.ops.mat_mul(x, x, name="e")
    p = place(g)
    assert (p["s"], p["e"]) == (ACCEL0, CPU0)  # einsum is CPU-only, though FAKE_ACCEL ranks higher
    assert "the node asks for label 'einsum'" in p.decision("e").explain()
    assert s.node.kernel_label == "systolic" and e.node.kernel_label == "einsum"


@pytest.mark.parametrize("request_", ["CPU:0", "/device:CPU:0", "CPU", CPU0, "/cpu:0"])
def test_requests_full_or_partial_are_honoured(g: kl.Graph, request_: str) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    with kl.device(request_):
        kl.ops.mat_mul(x, x, name="m")
    p = place(g)
    assert p["m"] == CPU0
    assert p.decision("m").reason == f"requested {request_!r} by node 'm'"


def test_an_impossible_request_is_an_error_or_soft_placed(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2], name="x")
    with kl.device(FAKE_ACCEL):
        kl.ops.tanh(x, name="t")
    with pytest.raises(kl.InvalidArgumentError) as info:
        place(g)
    message = str(info.value)
    assert (
        "node 't' (op Tanh) requests device 'FAKE_ACCEL', but cannot run on FAKE_ACCEL" in message
    )
    assert "no Tanh kernel for FAKE_ACCEL" in message and "allow_soft_placement" in message
    p = place(g, allow_soft_placement=True)
    assert p["t"] == CPU0
    assert p.decision("t").reason.startswith("soft placement: node 't' (op Tanh) requests device")


def test_a_request_for_a_missing_device_lists_the_devices(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2], name="x")
    with kl.device("GPU:1"):
        kl.ops.relu(x, name="r")
    with pytest.raises(
        kl.InvalidArgumentError,
        match=r"requests device 'GPU:1', but no device matches it; "
        r"the devices are: .*FAKE_ACCEL:0, .*CPU:0",
    ):
        place(g)
    assert place(g, allow_soft_placement=True)["r"] == ACCEL0


def test_a_colocation_group_goes_where_every_member_can_run(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    m = kl.ops.mat_mul(x, x, name="m")  # could run on FAKE_ACCEL alone
    with kl.colocate_with(m):
        kl.ops.tanh(m, name="t")  # CPU only
    p = place(g)
    assert p["m"] == p["t"] == CPU0
    assert p.decision("m").reason == (
        "highest-priority device type with a kernel for every member of its colocation group"
    )


def test_a_request_inside_a_group_applies_to_the_group(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    m = kl.ops.mat_mul(x, x, name="m")
    with kl.colocate_with(m), kl.device("CPU:0"):
        kl.ops.relu(m, name="r")
    p = place(g)
    assert p["m"] == p["r"] == CPU0


def test_conflicting_requests_in_a_group_are_an_error(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    with kl.device("CPU:0"):
        m = kl.ops.mat_mul(x, x, name="m")
    with kl.colocate_with(m), kl.device(FAKE_ACCEL):
        kl.ops.relu(m, name="r")
    with pytest.raises(
        kl.InvalidArgumentError,
        match="nodes 'm' and 'r' must be colocated but request different devices: "
        "'CPU:0' and 'FAKE_ACCEL'",
    ):
        place(g)


def test_colocation_with_a_missing_node_is_an_error(registry: klp.Registry) -> None:
    graph_def = json.loads(kl.Graph(registry).to_json())
    graph_def["nodes"] = [
        {
            "name": "x",
            "op": "Placeholder",
            "attrs": {"dtype": {"type": "float32"}, "_class": {"list": {"s": ["loc:@ghost"]}}},
        }
    ]
    g = kl.Graph.from_json(json.dumps(graph_def), registry=registry)
    with pytest.raises(
        kl.InvalidArgumentError,
        match=r"node 'x' .* must be colocated with 'ghost', which is not in the graph",
    ):
        place(g)


def test_colocation_with_a_node_the_step_does_not_run_is_dropped(registry: klp.Registry) -> None:
    """As TensorFlow's placer: a node colocated with one whose tensor is fed (its node is not
    in the step graph) runs; so does a fetch of it when its colocation target is not
    needed. A target in no graph at all stays an error (above)."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        y = kl.ops.square(x, name="y")
        with kl.colocate_with(y):
            z = kl.ops.neg(y, name="z")
        with kl.colocate_with(x):
            w = kl.ops.neg(kl.constant(np.ones(2, np.float32)), name="w")
    with kl.Session(g) as sess:
        np.testing.assert_array_equal(sess.run(z, {y: np.array([2, 3], np.float32)}), [-2, -3])
        np.testing.assert_array_equal(sess.run(z, {x: np.array([2, 3], np.float32)}), [-4, -9])
        np.testing.assert_array_equal(sess.run(w), [-1, -1])


def test_generators_follow_their_only_consumer(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    kl.ops.tanh(x + kl.constant(np.ones((2, 2), np.float32), name="c_cpu"), name="t")
    kl.ops.mat_mul(x, kl.constant(np.ones((2, 2), np.float32), name="c_accel"), name="m")
    shared = kl.constant(np.ones((2, 2), np.float32), name="shared")
    kl.ops.tanh(shared, name="t2")
    kl.ops.relu(shared, name="r2")
    p = place(g)
    assert p["add"] == ACCEL0 and p["c_cpu"] == ACCEL0  # the Add it feeds runs on FAKE_ACCEL
    assert p["c_accel"] == p["m"] == ACCEL0
    assert p.decision("c_accel").reason == "generator: follows its only consumer 'm'"
    assert p["shared"] == ACCEL0  # two consumers: not a generator, the priority rule applies
    assert p.decision("shared").reason == "highest-priority device type with a kernel for it"


def test_metadata_ops_follow_their_source(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 3], name="x")
    t = kl.ops.tanh(x, name="t")  # CPU
    r = kl.ops.reshape(t, [3, 2], name="r")  # FAKE_ACCEL has Reshape, but r follows t
    kl.ops.shape(t, name="s")
    m = kl.ops.mat_mul(x, kl.constant(np.ones((3, 2), np.float32)), name="m")  # FAKE_ACCEL
    kl.ops.reshape(m, [-1], name="r_accel")
    p = place(g)
    assert p["r"] == p["s"] == CPU0 and p["r_accel"] == ACCEL0
    assert p.decision("r").reason == "metadata op: follows its input 't'"
    assert r.node.op == "Reshape"


def test_no_type_at_all_is_an_error_listing_every_reason(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    # (kl.kernel_label refuses a label no kernel has; a loaded GraphDef can still ask.)
    g.add_node("MatMul", [x, x], {KERNEL_LABEL_ATTR: "nonexistent"}, name="m")
    with pytest.raises(kl.InvalidArgumentError) as info:
        place(g, allow_soft_placement=True)
    message = str(info.value)
    assert "no device type can run node 'm' (op MatMul)" in message
    assert "FAKE_ACCEL: unlabelled; the node asks for label 'nonexistent'" in message
    assert "CPU: unlabelled; the node asks for label 'nonexistent'" in message


def test_placer_explain_covers_every_node_and_type(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2], name="x")
    kl.ops.tanh(kl.ops.relu(x, name="r"), name="t")
    text = Placer(g, g.registry.create_devices()).explain()
    assert f"r (Relu) -> {ACCEL0}: highest-priority device type with a kernel for it" in text
    assert "t (Tanh) -> " in text and "    FAKE_ACCEL: no: no Tanh kernel for FAKE_ACCEL" in text
    assert text.count("    CPU: has a kernel") == 3


def test_log_device_placement_prints_each_decision(
    g: kl.Graph, capsys: pytest.CaptureFixture[str]
) -> None:
    x = kl.placeholder(kl.float32, [2], name="x")
    kl.ops.relu(x, name="r")
    place(g, log_device_placement=True)
    err = capsys.readouterr().err
    assert f"x (Placeholder): {ACCEL0} [generator: follows its only consumer 'r']" in err
    assert f"r (Relu): {ACCEL0}" in err


def test_the_fake_accelerator_catches_a_missing_copy(registry: klp.Registry) -> None:
    devices = registry.create_devices()
    accel = devices.lookup(FAKE_ACCEL)
    assert isinstance(accel, FakeAccelDevice)
    value = accel.copy_from_host(np.arange(3.0))
    assert isinstance(value, AccelArray) and not isinstance(value, np.ndarray)
    assert (accel.copies_to_device, accel.bytes_to_device) == (1, 24)
    np.testing.assert_array_equal(accel.copy_to_host(value), [0.0, 1.0, 2.0])
    assert accel.copies_to_host == 1
    with pytest.raises(TypeError, match="copy_to_host takes an AccelArray"):
        accel.copy_to_host(np.zeros(2))
    node = NodeDef(name="r", op="Relu", attrs={"T": kl.float64})
    for device, value_in, message in (
        (accel, np.zeros(2), "not accelerator memory: it was not copied to"),
        (devices.lookup("CPU"), value, "failed"),
    ):
        kernel = registry.create_kernel(node, device)
        ctx = klp.OpKernelContext(kernel, [value_in], device)
        with pytest.raises(kl.KernelError, match=message):
            run_compute(kernel, ctx)


class _NoUint16Device(FakeDevice):
    """A device whose buffers cannot hold uint16 (as torch's cannot)."""

    def holds(self, dtype: kl.DType) -> bool:
        return dtype != kl.uint16


def test_core_kernels_stay_off_a_device_that_cannot_hold_the_dtype() -> None:
    """Identity, IdentityN and the control-flow kernels take every dtype on every device;
    a node of a dtype the device cannot hold goes to the next type (the torch GPU's
    uint16: an Identity was placed there and its input's copy failed)."""
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    factory = FakeDeviceFactory("ACME", device_class=_NoUint16Device)
    registry.register_plugin(fake_plugin(("ACME", factory, 500)), name="acme")
    g = kl.Graph(registry)
    with g.as_default():
        small = kl.placeholder(kl.uint16, [3], name="small")
        wide = kl.placeholder(kl.float32, [3], name="wide")
        id16 = kl.ops.identity(small, name="id16")
        idn = kl.ops.identity_n([small, wide], name="idn")[0]
        kl.ops.identity(wide, name="id32")
        _, looped = kl.while_loop(
            lambda i, v: i < 2, lambda i, v: (i + 1, kl.ops.identity(v)), [kl.constant(0), small]
        )
    placement = place(g)
    acme0 = "/job:localhost/replica:0/task:0/device:ACME:0"
    assert placement["id16"] == CPU0 and placement["idn"] == CPU0
    assert placement["id32"] == acme0  # float32: the higher-priority type
    why = placement.decision("id16").explain()
    assert "ACME: no: its devices (numpy) cannot hold uint16 values" in why
    values = np.array([1, 2, 65535], np.uint16)
    with kl.Session(g) as session:
        got = session.run(
            [id16, idn, looped],
            {small: values, wide: np.ones(3, np.float32)},
        )
    for value in got:
        assert value.dtype == np.uint16
        np.testing.assert_array_equal(value, values)


# -- the step's feeds and fetches are named as the user's placeholders and tensors ------------

_CPU_ONLY = kl.SessionConfig(device_filters=("CPU",))  # no GPU, whatever the machine has


def _placement_error(graph: kl.Graph, fetch: object, feeds: dict[object, object]) -> str:
    with kl.Session(graph, _CPU_ONLY) as sess, pytest.raises(kl.InvalidArgumentError) as info:
        sess.run(fetch, feeds)
    return str(info.value)


@pytest.mark.parametrize("fetch", ["y", "x"])
def test_a_fed_placeholders_request_names_the_placeholder(fetch: str) -> None:
    """The step feeds x through an ``_Arg`` (``feed/x_0``) that inherits x's request: the
    error names x, the node the user built with that request, and says the fix."""
    g = kl.Graph()
    with g.as_default():
        with kl.device("/device:GPU:0"):
            x = kl.placeholder(kl.float32, [2], name="x")
        kl.ops.relu(x, name="y")
    message = _placement_error(g, f"{fetch}:0", {x: np.ones(2, np.float32)})
    assert message.startswith(
        "node 'x' (op Placeholder) requests device '/device:GPU:0', but no device matches it; "
        "the devices are: /job:localhost/replica:0/task:0/device:CPU:0"
    )
    assert "allow_soft_placement=True) would place it on a supported device" in message
    assert "feed/" not in message and "fetch/" not in message and "_Arg" not in message
    soft = kl.SessionConfig(device_filters=("CPU",), allow_soft_placement=True)
    with kl.Session(g, soft) as sess:
        np.testing.assert_array_equal(sess.run("y:0", {x: [-1.0, 2.0]}), [0.0, 2.0])
        explained = sess.explain("y:0", {x: [-1.0, 2.0]})
    assert "soft placement: node 'x' (op Placeholder) requests device '/device:GPU:0'" in explained


def test_an_imported_placeholders_request_names_the_placeholder() -> None:
    """A TensorFlow GraphDef's Placeholder asking for a GPU (the graph has x and y only)."""
    from kernloom.tf import import_graph_def

    g = import_graph_def(
        b"""
        node { name: "x" op: "Placeholder" device: "/device:GPU:0"
               attr { key: "dtype" value { type: DT_FLOAT } } }
        node { name: "y" op: "Relu" input: "x" attr { key: "T" value { type: DT_FLOAT } } }
        """
    )
    message = _placement_error(g, "y:0", {"x:0": np.ones(2, np.float32)})
    assert message.startswith("node 'x' (op Placeholder) requests device '/device:GPU:0', but")
    assert "feed/x_0" not in message


def test_a_fetched_nodes_request_names_the_node_not_its_fetch() -> None:
    """A fetch's ``_Retval`` is colocated with the node it fetches: the error names that node
    alone, as it would without the fetch."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        with kl.device("GPU:0"):
            kl.ops.tanh(x, name="on_gpu")
    message = _placement_error(g, "on_gpu:0", {x: np.ones(2, np.float32)})
    assert message.startswith("node 'on_gpu' (op Tanh) requests device 'GPU:0', but no device")
    assert "fetch/" not in message and "colocation group" not in message


def test_a_fetch_without_a_kernel_anywhere_lists_the_fetch_by_its_tensor(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    g.add_node("MatMul", [x, x], {KERNEL_LABEL_ATTR: "nonexistent"}, name="m")
    with kl.Session(g) as sess, pytest.raises(kl.InvalidArgumentError) as info:
        sess.run("m:0", {x: np.ones((2, 2), np.float32)})
    message = str(info.value)
    assert message.startswith("no device type can run node 'm' (op MatMul): no type has")
    assert "  - node 'm' (op MatMul): FAKE_ACCEL: unlabelled" in message
    assert "  - fetch 'm:0' (op _Retval): FAKE_ACCEL: yes, CPU: yes" in message
    assert "fetch/" not in message


def test_step_nodes_are_described_by_what_they_feed_or_fetch(g: kl.Graph) -> None:
    from kernloom.runtime.subgraph import build_step_graph, step_node_label, step_node_where

    x = kl.placeholder(kl.float32, [2], name="x")
    y = kl.ops.relu(x, name="y")
    kl.ops.tanh(y, name="t")
    step = build_step_graph(g, ["x:0", "y:0"], ["t:0", "y:0"], []).graph
    described = {
        n.name: (step_node_label(n), step_node_where(n))
        for n in step.nodes
        if n.op in ("_Arg", "_Retval")
    }
    assert described == {
        "feed/x_0": ("'x'", "node 'x' (op Placeholder)"),
        "feed/y_0": ("feed 'y:0'", "feed 'y:0' (op _Arg)"),
        "fetch/t_0": ("fetch 't:0'", "fetch 't:0' (op _Retval)"),
        "fetch/y_0": ("fetch 'y:0'", "fetch 'y:0' (op _Retval)"),
    }
    assert step_node_where(step.node("t")) == "node 't' (op Tanh)"
