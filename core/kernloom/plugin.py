"""``kernloom.plugin``: the one namespace a device plugin or kernel library imports.

Three audiences, three surfaces: graph authors use ``kernloom``; plugin authors use this
module (and ``kernloom.testing`` for the conformance kit and fakes); everything else in
the package is internal and may change in any release.

Compatibility policy
--------------------
``KERNLOOM_API`` is the version of this surface, ``MAJOR.MINOR``, independent of the
distribution's version. A plugin states the range it was written for in its entry-point
module (``KERNLOOM_API = ">=1.0,<2"``); the runtime checks it before calling the plugin's
hook and records an incompatible plugin instead of loading it.

- The minor version grows when a name is added here, or a method gains an optional
  argument: every plugin written for ``1.x`` keeps working on ``1.y`` for ``y >= x``.
- The major version grows when a name here is removed or renamed, a signature changes
  incompatibly, or a contract (what the runtime promises a kernel or a device, or what
  it asks of them) changes. A deprecated name keeps working, with a warning, for at
  least one minor release before it goes.
- The names are pinned by an API golden-file test (``tests/api/``): a change to this
  surface is a reviewed diff of that file.

What a device plugin implements (see ``docs/plugins.md``):

- ``Device``: ``_allocate``, ``copy_from_host``, ``copy_to_host`` and, where its buffers
  are not numpy arrays, the array protocol (``is_device_value``, ``value_nbytes``,
  ``value_dtype``, ``value_shape``, ``may_overwrite``, ``reshape_value``, and for speed
  ``copy_value`` and ``update_value``; see ``Device``);
- ``DeviceFactory``: ``list_physical_devices``, ``create_devices``, ``unavailable_reason``;
- a ``KernelLibrary`` of kernels (classes deriving ``OpKernel`` or plain functions of an
  ``OpKernelContext``);
- a ``kernloom_register(registry: Registrar)`` function marked with ``hookimpl``;
- optionally, graph passes for its device type (``Registrar.register_graph_pass``): a
  ``GraphPass`` that builds its result with a ``GraphRewriter`` (see ``docs/optimizer.md``),
  deciding with the helpers the built-in fusions use (``Consumers``, ``frame_nodes``,
  ``may_rewrite``, ``likely_device_type``, ``kernel_for``) and building with
  ``replace_groups`` where it fuses groups of nodes into one.
"""

from __future__ import annotations

from kernloom.dtypes import DType, as_dtype
from kernloom.errors import (
    InvalidArgumentError,
    KernelArgumentError,
    KernelError,
    RegistrationError,
)
from kernloom.framework import indexing_checks, spectral_checks
from kernloom.framework.allocator import AllocatorStats
from kernloom.framework.cast_rules import tf_cast
from kernloom.framework.device import (
    Device,
    DeviceAttributes,
    DeviceFactory,
    DeviceLocality,
    DeviceOptions,
    device_count_for,
    full_device_name,
)
from kernloom.framework.device_independent_kernels import (
    register_device_independent_kernels,
    register_graph_kernels,
)
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.framework.device_name import LOCAL_PREFIX
from kernloom.framework.fused_evaluator import compile_steps as compile_fused_steps
from kernloom.framework.fused_inputs import FusedDirect, FusedInputs
from kernloom.framework.inter_op import on_inter_op_worker
from kernloom.framework.kernel_checks import (
    add_n_shape,
    argmax_axis,
    axes_of,
    bias_channel,
    bitcast_dims,
    broadcast_shape,
    check_bias,
    check_permutation,
    concat_shape,
    fill_dims,
    matmul_shape,
    reduced_shape,
    reduction_axes,
    reshape_dims,
    select_condition_shape,
    tf_reshape_dims,
)
from kernloom.framework.kernel_def import KernelDef, KernelDefBuilder
from kernloom.framework.kernel_registry import KernelLibrary, NoKernelError
from kernloom.framework.numpy_elementwise import (
    NUMPY_ELEMENTWISE,
    OUT_BY_KEYWORD,
    OUT_BY_POSITION,
)
from kernloom.framework.op_def import ArgDef, AttrDef, OpDef, OpDefBuilder, OpLibrary
from kernloom.framework.op_kernel import (
    AsyncOpKernel,
    KernelSignature,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
)
from kernloom.framework.origin import Origin
from kernloom.framework.output_layout import (
    concat_output,
    elementwise_output,
    memory_order,
    same_layout_output,
    transpose_output,
)
from kernloom.framework.probed_factory import Probe, ProbedDeviceFactory
from kernloom.framework.shape_inference import (
    InferenceContext,
    broadcast_binary_shape,
    broadcast_shapes,
    normalize_axis,
    reduction_shape,
    unchanged_shape,
)
from kernloom.framework.variable_kernels import register_variable_kernels
from kernloom.hooks import KERNLOOM_API_VERSION, hookimpl
from kernloom.op_library import types
from kernloom.op_library.conv_ops import Window, Window2D, WindowAttrs, window_attrs
from kernloom.op_library.fused_ops import (
    BIAS_FORMS,
    CONV_FORMS,
    FUSED_ACTIVATIONS,
    RESIDUAL_FORMS,
    FusedOps,
    parse_fused_ops,
)
from kernloom.op_library.fused_ops import parse_expression as parse_fused_expression
from kernloom.op_library.fused_ops import plan_expression as plan_fused_expression
from kernloom.op_library.image_ops import (
    NMS_HOST_MEMORY,
    NMS_TYPES,
    CropTaps,
    bicubic_weights,
    bilinear_weights,
    check_crop_boxes,
    crop_and_resize_shape,
    crop_taps,
    depth_to_space_shape,
    nearest_indices,
    non_max_suppression,
    resize_output_shape,
    space_to_depth_shape,
)
from kernloom.op_library.linalg_ops import (
    DiagBand,
    EinsumEquation,
    EinsumPlan,
    band_limits,
    band_mask,
    batch_matmul_shape,
    diag_range,
    matrix_diag_size,
    solve_shape,
    square_batch,
    triangular_solve_shape,
)
from kernloom.optimizer.analysis import Consumers, frame_nodes, fused_from, may_rewrite
from kernloom.optimizer.graph_pass import FUSED_FROM_ATTR, GraphPass, PassContext
from kernloom.optimizer.placement_hint import kernel_for, likely_device_type
from kernloom.optimizer.rewriter import GraphRewriter, replace_groups
from kernloom.registrar import Registrar
from kernloom.registry import Registry, default_registry
from kernloom.shapes import TensorShape, as_shape

KERNLOOM_API = KERNLOOM_API_VERSION
"""The version of this surface; a plugin's ``KERNLOOM_API`` range is checked against it."""

__all__ = [
    "BIAS_FORMS",
    "CONV_FORMS",
    "FUSED_ACTIVATIONS",
    "FUSED_FROM_ATTR",
    "KERNLOOM_API",
    "LOCAL_PREFIX",
    "NMS_HOST_MEMORY",
    "NMS_TYPES",
    "NUMPY_ELEMENTWISE",
    "OUT_BY_KEYWORD",
    "OUT_BY_POSITION",
    "RESIDUAL_FORMS",
    "AllocatorStats",
    "ArgDef",
    "AsyncOpKernel",
    "AttrDef",
    "Consumers",
    "CropTaps",
    "DType",
    "Device",
    "DeviceAttributes",
    "DeviceFactory",
    "DeviceLocality",
    "DeviceMgr",
    "DeviceOptions",
    "DiagBand",
    "EinsumEquation",
    "EinsumPlan",
    "FusedDirect",
    "FusedInputs",
    "FusedOps",
    "GraphPass",
    "GraphRewriter",
    "InferenceContext",
    "InvalidArgumentError",
    "KernelArgumentError",
    "KernelDef",
    "KernelDefBuilder",
    "KernelError",
    "KernelLibrary",
    "KernelSignature",
    "NoKernelError",
    "OpDef",
    "OpDefBuilder",
    "OpKernel",
    "OpKernelConstruction",
    "OpKernelContext",
    "OpLibrary",
    "Origin",
    "PassContext",
    "Probe",
    "ProbedDeviceFactory",
    "Registrar",
    "RegistrationError",
    "Registry",
    "TensorShape",
    "Window",
    "Window2D",
    "WindowAttrs",
    "add_n_shape",
    "argmax_axis",
    "as_dtype",
    "as_shape",
    "axes_of",
    "band_limits",
    "band_mask",
    "batch_matmul_shape",
    "bias_channel",
    "bicubic_weights",
    "bilinear_weights",
    "bitcast_dims",
    "broadcast_binary_shape",
    "broadcast_shape",
    "broadcast_shapes",
    "check_bias",
    "check_crop_boxes",
    "check_permutation",
    "compile_fused_steps",
    "concat_output",
    "concat_shape",
    "crop_and_resize_shape",
    "crop_taps",
    "default_registry",
    "depth_to_space_shape",
    "device_count_for",
    "diag_range",
    "elementwise_output",
    "fill_dims",
    "frame_nodes",
    "full_device_name",
    "fused_from",
    "hookimpl",
    "indexing_checks",
    "kernel_for",
    "likely_device_type",
    "matmul_shape",
    "matrix_diag_size",
    "may_rewrite",
    "memory_order",
    "nearest_indices",
    "non_max_suppression",
    "normalize_axis",
    "on_inter_op_worker",
    "parse_fused_expression",
    "parse_fused_ops",
    "plan_fused_expression",
    "reduced_shape",
    "reduction_axes",
    "reduction_shape",
    "register_device_independent_kernels",
    "register_graph_kernels",
    "register_variable_kernels",
    "replace_groups",
    "reshape_dims",
    "resize_output_shape",
    "same_layout_output",
    "select_condition_shape",
    "solve_shape",
    "space_to_depth_shape",
    "spectral_checks",
    "square_batch",
    "tf_cast",
    "tf_reshape_dims",
    "transpose_output",
    "triangular_solve_shape",
    "types",
    "unchanged_shape",
    "window_attrs",
]
