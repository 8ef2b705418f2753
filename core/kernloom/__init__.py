"""kernloom: a pluggable dataflow runtime on the architecture of TensorFlow's core runtime.

This module is the graph author's surface: build graphs, run them in sessions, handle
their errors. Device plugins and kernel libraries use ``kernloom.plugin``; the conformance
kit and the fakes are in ``kernloom.testing``. Everything is re-exported from the modules
that define it, and nothing inside kernloom imports from here. Other modules are internal
and may change between releases.
"""

from kernloom import ops, train
from kernloom.dtypes import (
    DType,
    all_dtypes,
    as_dtype,
    bool_,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    resource,
    uint8,
    uint16,
    uint32,
    uint64,
)
from kernloom.errors import (
    AlreadyExistsError,
    CancelledError,
    DeadlineExceededError,
    DeviceError,
    InvalidArgumentError,
    KernelArgumentError,
    KernelError,
    KernloomError,
    KernloomPluginWarning,
    NotFoundError,
    PluginError,
    ResourceExhaustedError,
)
from kernloom.framework.cancellation import CancellationManager
from kernloom.graph.builder import (
    colocate_with,
    constant,
    control_dependencies,
    device,
    kernel_label,
    name_scope,
    placeholder,
)
from kernloom.graph.control_flow import cond, while_loop
from kernloom.graph.graph import Graph, Node, get_default_graph
from kernloom.graph.tensor import Tensor
from kernloom.graph.variables import Variable, global_variables, variables_initializer
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import RunMetadata, RunOptions, SessionConfig
from kernloom.runtime.step_stats import StepStats, chrome_trace
from kernloom.shapes import TensorShape, as_shape
from kernloom.version import __version__

__all__ = [
    "AlreadyExistsError",
    "CancellationManager",
    "CancelledError",
    "DType",
    "DeadlineExceededError",
    "DeviceError",
    "Graph",
    "InvalidArgumentError",
    "KernelArgumentError",
    "KernelError",
    "KernloomError",
    "KernloomPluginWarning",
    "Node",
    "NotFoundError",
    "PluginError",
    "ResourceExhaustedError",
    "RunMetadata",
    "RunOptions",
    "Session",
    "SessionConfig",
    "StepStats",
    "Tensor",
    "TensorShape",
    "Variable",
    "__version__",
    "all_dtypes",
    "as_dtype",
    "as_shape",
    "bool_",
    "chrome_trace",
    "colocate_with",
    "complex64",
    "complex128",
    "cond",
    "constant",
    "control_dependencies",
    "device",
    "float16",
    "float32",
    "float64",
    "get_default_graph",
    "global_variables",
    "int8",
    "int16",
    "int32",
    "int64",
    "kernel_label",
    "name_scope",
    "ops",
    "placeholder",
    "resource",
    "train",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "variables_initializer",
    "while_loop",
]
