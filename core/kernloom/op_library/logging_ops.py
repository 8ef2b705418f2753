"""``IdentityN`` and ``Assert``: the ops whose inputs are lists of tensors of *different*
dtypes, declared by a ``list(type)`` attr (``T: list(type)``), as TensorFlow's.

``IdentityN`` passes a list through unchanged (TensorFlow writes it around gradients and
function outputs); ``Assert`` fails the step, showing its data, when its condition is
false (``tf.debugging.Assert``: a node used through a control dependency).
"""

from __future__ import annotations

from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import InferenceContext

__all__ = ["define"]


def _identity_n_shape(ctx: InferenceContext) -> None:
    for i in range(ctx.num_inputs):
        ctx.set_output(i, ctx.input_shape(i))


def _assert_shape(ctx: InferenceContext) -> None:
    condition = ctx.input_shape(0)
    if condition.rank not in (None, 0):  # TensorFlow's kernel: "should be a scalar"
        raise ctx.fail(
            f"the condition must be a scalar bool, got shape {condition}; reduce it first "
            f"(kl.ops.all)"
        )


def define(lib: OpLibrary) -> None:
    (
        lib.register_op("IdentityN")
        .input("input: T")
        .output("output: T")
        .attr("T: list(type) >= 1")
        .shape_fn(_identity_n_shape)
        .doc(
            "Each input, unchanged (their buffers are shared, not copied); the inputs may "
            "have different dtypes."
        )
    )
    (
        lib.register_op("Assert")
        .input("condition: bool")
        .input("data: T")
        .attr("T: list(type) >= 1")
        .attr("summarize: int = 3")
        .shape_fn(_assert_shape)
        .stateful()
        .doc(
            "Fails the step with an InvalidArgumentError naming the node and showing the "
            "first `summarize` values of each data tensor when condition is false; does "
            "nothing when it is true.",
            "It has no outputs: make what must wait for it depend on it "
            "(kl.control_dependencies), as with tf.debugging.Assert.",
        )
    )
