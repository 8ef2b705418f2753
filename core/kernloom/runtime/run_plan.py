"""What a ``Session.run`` call resolves before it can run, resolved once per signature.

Every run names its fetches and feeds, and before anything executes the session must find
their tensors in the graph, check that no tensor is fed twice, work out how to rebuild
the fetch structure and look up the compiled step. For a hot loop that repeats one call,
that is the same work every time, and on a machine whose caches the kernels just flushed
it costs tens of microseconds per run. A ``RunPlan`` is that work done once: TensorFlow's
``Session.make_callable``, which ``Session.run`` also uses behind the scenes for calls it
can recognise (``signature_key``).

Only the feed values are checked on every run (``check_feed``): their dtype and shape can
change from one call to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernloom.convert import convert_to_dtype
from kernloom.errors import Hint, InvalidArgumentError, ResourceExhaustedError, Setting
from kernloom.graph.graph import Graph
from kernloom.graph.tensor import Tensor
from kernloom.runtime.fetches import FetchPlan, plan_fetches, resolve_tensor

__all__ = ["RunPlan", "check_feed", "signature_key"]

Array = np.ndarray[Any, Any]


def _feed_where(tensor: Tensor) -> str:
    """How a feed's errors name it (built only on an error: formatting costs on every run)."""
    return f"feed for {tensor.name!r} ({tensor.dtype.name}, shape {tensor.shape})"


def check_feed(tensor: Tensor, value: object) -> Array:
    """``value`` as an array of ``tensor``'s dtype, or an error saying why it cannot feed it
    (a symbolic tensor, a value the dtype cannot represent -- ``kernloom.convert`` holds
    that rule --, a shape that does not fit the placeholder)."""
    if isinstance(value, Tensor):
        raise InvalidArgumentError(
            f"{_feed_where(tensor)} is a kl.Tensor; feed a value (numpy array, number or list)"
        )
    key = tensor.name.removesuffix(":0")
    try:
        array = convert_to_dtype(
            value,
            tensor.dtype,
            what=_feed_where(tensor),
            given_as=Setting("feed_array", key=key),
        )
    except MemoryError as exc:
        raise ResourceExhaustedError(
            f"{_feed_where(tensor)}: out of host memory converting the value to "
            f"{tensor.dtype.name}: {exc}"
        ) from None
    if not tensor.shape.is_compatible_with(array.shape):
        raise InvalidArgumentError(
            f"{_feed_where(tensor)} has shape {list(array.shape)}, which does not fit "
            f"{tensor.shape}.",
            hint=Hint(
                f"Give a value of shape {tensor.shape}"
                + (" (? is any size)" if "?" in str(tensor.shape) else "")
                + " as {feed}.",
                feed=Setting("feed", key=key),
            ),
        )
    return array


def resolve_feeds(graph: Graph, keys: Sequence[object]) -> tuple[Tensor, ...]:
    """The fed tensors, in the order of ``keys``; a tensor fed twice is an error."""
    tensors: list[Tensor] = []
    seen: set[str] = set()
    for key in keys:
        tensor = resolve_tensor(graph, key, "feed")
        if tensor.name in seen:
            raise InvalidArgumentError(
                f"tensor {tensor.name!r} is fed twice: two feed keys name it (a tensor and "
                f"its name, or 'x' and 'x:0'); keep one"
            )
        seen.add(tensor.name)
        tensors.append(tensor)
    return tuple(tensors)


def signature_key(graph: Graph, fetches: object, feed_dict: object) -> tuple[Any, ...] | None:
    """A key under which a run's resolved plan can be cached, or None when the call is not
    one ``Session.run`` caches: fetches other than a tensor, a name, or a plain list,
    tuple or dict of them (a nested structure or a namedtuple would need its whole shape
    in the key), or feeds other than a plain dict. The graph's size is part of the key
    because a graph that grew may resolve a name differently ("y" for a node added
    since)."""
    kind = type(fetches)
    if kind is Tensor or kind is str:
        fetch_key: object = fetches
    elif kind is list or kind is tuple:
        items: Sequence[object] = fetches  # type: ignore[assignment]
        if not all(type(item) is Tensor or type(item) is str for item in items):
            return None
        fetch_key = (kind, *items)
    elif kind is dict:  # a flat dict of tensors or names (a training loop's usual fetch)
        named: dict[Any, object] = fetches  # type: ignore[assignment]
        values = tuple(named.values())
        if not all(type(item) is Tensor or type(item) is str for item in values):
            return None
        fetch_key = (dict, tuple(named), values)
    else:
        return None
    if feed_dict is None:
        feed_keys: tuple[object, ...] = ()
    elif type(feed_dict) is dict:
        feed_keys = tuple(feed_dict)
    else:
        return None
    return (len(graph), fetch_key, feed_keys)


_FeedCheck = tuple[int, Tensor, Any, int, tuple[tuple[int, int], ...]]
"""(position among the caller's values, tensor, numpy dtype, rank or -1 if unknown,
(axis, size) for each known dimension)."""


def _feed_check(position: int, tensor: Tensor) -> _FeedCheck:
    dims = tensor.shape.dims
    rank = -1 if dims is None else len(dims)
    known = tuple((axis, size) for axis, size in enumerate(dims or ()) if size is not None)
    return (position, tensor, tensor.dtype.numpy_dtype, rank, known)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """A run signature resolved against the graph: which tensors are fed (in the caller's
    order), how they map to the step's ``_Arg``s, and what is fetched."""

    fetches: FetchPlan
    feeds: tuple[Tensor, ...]
    """The fed tensors, in the order the caller gives their values."""
    feed_names: tuple[str, ...]
    """The fed tensor names, sorted: the step's ``_Arg`` order."""
    targets: tuple[str, ...]
    checks: tuple[_FeedCheck, ...]
    """One per ``_Arg``, in ``_Arg`` order."""
    single: bool
    """Whether the fetch is a lone tensor: its value is the result, no structure to build."""

    @classmethod
    def build(
        cls, graph: Graph, fetches: object, feed_keys: Sequence[object], targets: Sequence[str]
    ) -> RunPlan:
        fetch_plan = plan_fetches(graph, fetches)
        feeds = resolve_feeds(graph, feed_keys)
        order = sorted(range(len(feeds)), key=lambda i: feeds[i].name)
        return cls(
            fetch_plan,
            feeds,
            tuple(feeds[i].name for i in order),
            tuple(sorted({*fetch_plan.targets, *targets})),
            tuple(_feed_check(i, feeds[i]) for i in order),
            type(fetches) is Tensor,
        )

    def args(self, values: Sequence[object]) -> list[Array]:
        """The checked feed values in ``_Arg`` order, from values in the caller's order."""
        if len(values) != len(self.feeds):
            raise InvalidArgumentError(
                f"expected {len(self.feeds)} feed value(s) (for "
                f"{', '.join(t.name for t in self.feeds) or 'no feeds'}), got {len(values)}: "
                f"call it with one value per tensor of make_callable's feed_list, in that order"
            )
        args = []
        for position, tensor, dtype, rank, known in self.checks:
            value = values[position]
            # The common case in a few loads: an array of the dtype, of a fitting shape.
            if type(value) is np.ndarray and value.dtype is dtype:
                shape = value.shape
                fits = rank < 0 or len(shape) == rank
                if fits:
                    for axis, size in known:
                        if shape[axis] != size:
                            fits = False
                if fits:
                    args.append(value)
                    continue
            args.append(check_feed(tensor, value))
        return args

    def results(self, values: list[Any]) -> Any:
        """The fetched values, in the structure the caller fetched them in."""
        if self.single:
            return values[0]
        return self.fetches.rebuild(dict(zip(self.fetches.tensors, values, strict=True)))


RunCallable = Callable[..., Any]
"""What ``Session.make_callable`` returns: call it with the feed values, in order."""
