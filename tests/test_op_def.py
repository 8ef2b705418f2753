"""OpDef specs, the builder, attr checking and inference, and registration through plugins."""

from __future__ import annotations

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
import kernloom.testing
from kernloom.framework.op_def import OpDefBuilder


def test_spec_strings_are_parsed_like_tensorflow() -> None:
    op = (
        OpDefBuilder("Gather")
        .input("params: T")
        .input("indices: Tidx")
        .input("extra: N * float32")
        .output("out: T")
        .attr("T: {float32, int32}")
        .attr("Tidx: {int32, int64} = int64")
        .attr("N: int >= 2")
        .attr("mode: {'clip', 'wrap'} = 'clip'")
        .attr("scale: float = 0.5")
        .attr("dims: list(int) = [1, 2]")
        .attr("shape: shape = [2, ?]")
        .attr("flag: bool = true")
        .finalize()
    )
    params, indices, extra = op.inputs
    assert (params.type_attr, indices.type_attr) == ("T", "Tidx")
    assert (extra.number_attr, extra.dtype) == ("N", kl.float32)
    attrs = {a.name: a for a in op.attrs}
    assert attrs["T"].allowed_values == (kl.float32, kl.int32) and not attrs["T"].has_default
    assert attrs["Tidx"].default is kl.int64
    assert attrs["N"].minimum == 2
    assert attrs["mode"].allowed_values == ("clip", "wrap") and attrs["mode"].default == "clip"
    assert attrs["scale"].default == 0.5 and attrs["dims"].default == [1, 2]
    assert attrs["shape"].default == kl.TensorShape([2, None]) and attrs["flag"].default is True
    assert op.signature() == "Gather(params: T, indices: Tidx, extra: N * float32) -> (out: T)"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda b: b.input("a T"), "malformed input spec 'a T'"),
        (lambda b: b.input("A: T"), "input names are lower_case"),
        (lambda b: b.output("x: 3 * T"), "malformed output spec"),
        (
            lambda b: b.attr("T: {float32, flaot64}"),
            "'flaot64' is neither a dtype.*Did you mean 'float64'",
        ),
        (lambda b: b.attr("x: integer"), "unknown attr type 'integer'"),
        (lambda b: b.attr("x: bool = maybe"), "bad bool literal 'maybe'"),
        (lambda b: b.attr("x: {'a', 'b'} = 'c'"), "default 'c': value 'c' is not allowed"),
        (lambda b: b.attr("T: {float32} = int32"), "default int32: value int32 is not allowed"),
        (lambda b: b.attr("N: int >= 2 = 1"), "value 1 is below the minimum 2"),
        (lambda b: b.attr("x: string >= 1"), "applies to int and list attrs only"),
        (lambda b: b.attr("x: {}"), "malformed attr spec"),
    ],
)
def test_malformed_specs_name_the_op_and_the_spec(build: object, message: str) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=message) as info:
        build(OpDefBuilder("MyOp"))  # type: ignore[operator]
    assert "op MyOp" in str(info.value)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda b: b.input("a: T"), "refers to attr 'T', which is not declared"),
        (
            lambda b: b.input("a: T").attr("T: int"),
            "takes its dtype from attr 'T', which is of type int",
        ),
        (lambda b: b.input("a: N * float32"), "needs an int attr 'N'"),
        (
            lambda b: b.input("a: N * T").attr("T: list(type)").attr("N: int"),
            "a list\\(type\\) attr gives each tensor its own dtype",
        ),
        (lambda b: b.input("a: float32").output("a: float32"), "argument name 'a' is used twice"),
    ],
)
def test_inconsistent_definitions_fail_when_finalised(build: object, message: str) -> None:
    builder = OpDefBuilder("MyOp")
    build(builder)  # type: ignore[operator]
    with pytest.raises(kl.InvalidArgumentError, match=message):
        builder.finalize()


@pytest.mark.parametrize("name", ["matMul", "Mat-Mul", "", "1Op"])
def test_op_names_are_camel_case(name: str) -> None:
    with pytest.raises(kl.InvalidArgumentError, match="must be CamelCase"):
        OpDefBuilder(name)


def test_node_attrs_are_checked_with_the_node_named() -> None:
    matmul = klp.Registry().op_def("MatMul")
    assert matmul.check_attrs({"T": "float32"}, "mm") == {
        "T": kl.float32,
        "transpose_a": False,
        "transpose_b": False,
        "grad_a": False,
        "grad_b": False,
    }
    with pytest.raises(
        kl.InvalidArgumentError, match=r"node 'mm' \(op MatMul\).*value bool is not allowed"
    ):
        matmul.check_attrs({"T": kl.bool_}, "mm")
    with pytest.raises(
        kl.InvalidArgumentError, match=r"expected a value of attr type bool, got 'yes'"
    ):
        matmul.check_attrs({"T": kl.float32, "transpose_a": "yes"}, "mm")
    with pytest.raises(kl.InvalidArgumentError, match="is missing attr 'T'"):
        matmul.check_attrs({}, "mm")
    with pytest.raises(
        kl.InvalidArgumentError, match=r"does not declare.*Did you mean .*'transpose_a'"
    ):
        matmul.check_attrs({"T": kl.float32, "transpose": True}, "mm")
    concat = klp.Registry().op_def("ConcatV2")
    with pytest.raises(kl.InvalidArgumentError, match="below the minimum 2"):
        concat.check_attrs({"T": kl.float32, "N": 1}, "c")
    assert matmul.check_attrs({"T": kl.float32, "_kernel": "einsum"}, "mm")["_kernel"] == "einsum"


def test_type_and_length_attrs_are_inferred_from_inputs() -> None:
    concat = klp.Registry().op_def("ConcatV2")
    attrs = concat.infer_attrs([[kl.float32] * 3, kl.int64], {}, "c")
    assert (attrs["T"], attrs["N"], attrs["Tidx"]) == (kl.float32, 3, kl.int64)
    with pytest.raises(kl.InvalidArgumentError, match="has T=int32, but T=float32"):
        concat.infer_attrs([[kl.float32, kl.int32], kl.int32], {}, "c")
    add = klp.Registry().op_def("Add")
    with pytest.raises(kl.InvalidArgumentError, match=r"takes 2 input\(s\)"):
        add.infer_attrs([kl.float32], {}, "a")
    with pytest.raises(
        kl.InvalidArgumentError, match="input 'condition: bool' must be bool, got float32"
    ):
        klp.Registry().op_def("Select").infer_attrs([kl.float32, kl.float32, kl.float32], {}, "s")


def test_a_list_type_attr_declares_a_list_of_tensors_of_several_dtypes() -> None:
    op = (
        OpDefBuilder("MyIdentityN")
        .input("input: T")
        .output("output: T")
        .attr("T: list(type) >= 1")
        .finalize()
    )
    (arg,) = op.inputs
    assert (arg.type_list_attr, arg.type_attr, arg.is_list) == ("T", None, True)
    assert op.signature() == "MyIdentityN(input: T) -> (output: T)"
    attrs = op.infer_attrs([[kl.float32, kl.int64, kl.bool_]], {}, "n")
    assert attrs["T"] == [kl.float32, kl.int64, kl.bool_]
    assert op.output_dtypes(attrs) == [kl.float32, kl.int64, kl.bool_]
    assert op.arg_ranges(True, attrs) == {"output": (0, 3)}
    # an explicit T must agree with the inputs; an empty list is below the minimum
    assert op.infer_attrs([[kl.int32]], {"T": ["int32"]}, "n")["T"] == [kl.int32]
    with pytest.raises(kl.InvalidArgumentError, match=r"has T=\[float32\], but T=\[int32\]"):
        op.infer_attrs([[kl.float32]], {"T": [kl.int32]}, "n")
    with pytest.raises(kl.InvalidArgumentError, match="length 0 is below the minimum 1"):
        op.infer_attrs([[]], {}, "n")
    with pytest.raises(kl.InvalidArgumentError, match="takes a list of tensors"):
        op.infer_attrs([kl.float32], {}, "n")


def test_unknown_op_suggests_the_nearest() -> None:
    with pytest.raises(kl.NotFoundError, match=r"no op named 'Matmul'.*Did you mean 'MatMul'"):
        klp.Registry().op_def("Matmul")


def zero_out_plugin(register_kernel: bool = True, bad: str = "") -> object:
    """The seed's custom op, ZeroOut, with its kernel, as a plugin."""

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            builder = (
                registry.register_op("ZeroOut").input("to_zero: int32").output("zeroed: int32")
            )
            if bad == "spec":
                builder.attr("oops: nonsense")
            lib = klp.KernelLibrary()
            op = "ZeroOtu" if bad == "kernel-op" else "ZeroOut"
            constraints = {"T": [kl.int32]} if bad == "kernel-attr" else None

            @lib.kernel(op, device="CPU", type_constraints=constraints)
            def zero_out(ctx: klp.OpKernelContext) -> None:
                x = ctx.input(0)
                out = ctx.allocate_output(0, x.shape)
                out[...] = 0
                out.reshape(-1)[:1] = x.reshape(-1)[:1]

            if register_kernel:
                registry.register_kernels(lib)
            registry.register_device_factory(
                "ZCPU", kl.testing.FakeDeviceFactory("ZCPU"), priority=1
            )

    return Plugin()


def test_a_plugin_op_and_kernel_go_through_the_same_registry() -> None:
    registry = klp.Registry()
    record = registry.register_plugin(zero_out_plugin(), name="zero_out")
    assert "1 op(s): ZeroOut" in record.registered
    assert registry.ops.registration("ZeroOut").origin.plugin == "zero_out"  # type: ignore[union-attr]
    assert "ZeroOut" in registry.ops and "MatMul" in registry.ops
    assert "ZeroOut" not in klp.Registry().ops  # registries are isolated


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("spec", "unknown attr type 'nonsense'"),
        ("kernel-op", "is for op 'ZeroOtu', which is not registered"),
        ("kernel-attr", "constrains attr 'T', which op ZeroOut does not have"),
    ],
)
def test_a_bad_registration_leaves_nothing_behind(bad: str, message: str) -> None:
    registry = klp.Registry()
    with pytest.raises(kl.PluginError, match=message):
        registry.register_plugin(zero_out_plugin(bad=bad), name="zero_out")
    assert "ZeroOut" not in registry.ops
    assert registry.kernels.kernels("ZeroOut") == []
    assert registry.placement_order() == []  # its device factory was not kept either


def test_a_plugin_cannot_redefine_a_standard_op() -> None:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("MatMul").input("a: float32").output("b: float32")

    with pytest.raises(
        kl.PluginError, match="op MatMul is already registered by plugin 'kernloom'"
    ):
        klp.Registry().register_plugin(Plugin(), name="dup")


def test_const_value_must_match_dtype() -> None:
    from kernloom.framework.shape_inference import InferenceContext, infer_shapes

    const = klp.Registry().op_def("Const")
    attrs = const.check_attrs({"value": np.zeros(2, np.int32), "dtype": kl.float32}, "c")
    with pytest.raises(
        kl.InvalidArgumentError, match="value has dtype int32, but attr dtype is float32"
    ):
        infer_shapes(InferenceContext(const, "c", attrs, [], []))
