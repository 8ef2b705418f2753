"""Resolved run signatures: ``Session.make_callable``, the plans ``Session.run`` caches, and
the per-run feed checks that stay (dtype, rank, known dimensions)."""

from __future__ import annotations

import collections
import threading
from typing import Any

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.runtime import run_plan
from kernloom.runtime.run_plan import RunPlan, signature_key


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry()


def affine(registry: klp.Registry) -> tuple[kl.Graph, kl.Tensor, kl.Tensor, kl.Tensor]:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        b = kl.placeholder(kl.float32, [3], name="b")
        w = kl.constant(np.arange(9, dtype=np.float32).reshape(3, 3), name="w")
        y = kl.ops.add(kl.ops.mat_mul(x, w), b, name="y")
    return g, x, b, y


W = np.arange(9, dtype=np.float32).reshape(3, 3)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The fetches of every plan built (resolved from scratch)."""
    built: list[object] = []
    original = RunPlan.build.__func__  # type: ignore[attr-defined]

    def spy(cls: type[RunPlan], graph: kl.Graph, fetches: object, *rest: Any) -> RunPlan:
        built.append(fetches)
        plan: RunPlan = original(cls, graph, fetches, *rest)
        return plan

    monkeypatch.setattr(RunPlan, "build", classmethod(spy))
    return built


def test_a_callable_runs_its_fetches_with_positional_feeds(registry: klp.Registry) -> None:
    g, _, b, y = affine(registry)
    xv = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    bv = np.array([1.0, -2.0, 0.5], np.float32)
    with kl.Session(g) as sess:
        # The caller's order need not be the graph's: b first, then x.
        run = sess.make_callable({"y": y, "both": [y, "x:0"]}, [b, "x"])
        out = run(bv, xv)
        again = run(bv * 2, xv)
    np.testing.assert_allclose(out["y"], xv @ W + bv, rtol=1e-6)
    np.testing.assert_allclose(out["both"][0], xv @ W + bv, rtol=1e-6)
    np.testing.assert_array_equal(out["both"][1], xv)
    np.testing.assert_allclose(again["y"], xv @ W + 2 * bv, rtol=1e-6)


def test_a_callable_takes_run_options_and_metadata(registry: klp.Registry) -> None:
    g, x, b, y = affine(registry)
    md = kl.RunMetadata()
    with kl.Session(g) as sess:
        run = sess.make_callable(y, [x, b])
        got = run(np.ones((2, 3), np.float32), np.zeros(3, np.float32),
                  options=kl.RunOptions(trace=True), run_metadata=md)  # fmt: skip
    np.testing.assert_allclose(got, np.ones((2, 3)) @ W)
    assert md.step_stats is not None
    assert {s.node for s in md.step_stats.nodes} >= {"y", "w"}


def test_a_callable_checks_every_call_and_names_what_is_wrong(registry: klp.Registry) -> None:
    g, x, b, y = affine(registry)
    with kl.Session(g) as sess:
        run = sess.make_callable(y, [x, b])
        with pytest.raises(kl.InvalidArgumentError, match=r"expected 2 feed value\(s\).*x:0, b:0"):
            run(np.ones((2, 3), np.float32))
        with pytest.raises(kl.InvalidArgumentError, match=r"feed for 'x:0'.*shape \[2, 4\]"):
            run(np.ones((2, 4), np.float32), np.zeros(3, np.float32))
        with pytest.raises(kl.InvalidArgumentError, match=r"feed for 'x:0'.*shape \[3\]"):
            run(np.ones(3, np.float32), np.zeros(3, np.float32))  # rank 1 for rank 2
        with pytest.raises(kl.InvalidArgumentError, match=r"feed for 'b:0'.*complex128"):
            run(np.ones((2, 3), np.float32), np.zeros(3, complex))
        # A list or a float64 array converts, as with run().
        np.testing.assert_allclose(run([[1, 0, 0]], np.zeros(3)), [W[0]])
        with pytest.raises(kl.NotFoundError, match=r"feed 'bb'.*Did you mean 'b'"):
            sess.make_callable(y, [x, "bb"])
        with pytest.raises(kl.InvalidArgumentError, match=r"'x:0' is fed twice"):
            sess.make_callable(y, [x, "x:0"])
        with pytest.raises(kl.NotFoundError, match=r"fetch 'z' is not a node"):
            sess.make_callable("z", [x, b])
    with pytest.raises(kl.KernloomError, match="session is closed"):
        run(np.ones((2, 3), np.float32), np.zeros(3, np.float32))
    with pytest.raises(kl.KernloomError, match="session is closed"):
        sess.make_callable(y, [x, b])


def test_a_callable_runs_the_graph_as_it_was_when_made(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        kl.ops.neg(x, name="y")
    with kl.Session(g) as sess:
        run = sess.make_callable("y", ["x"])
        with g.as_default():
            kl.ops.exp(x, name="z")
        np.testing.assert_array_equal(run(np.array([1, 2], np.float32)), [-1, -2])
        np.testing.assert_allclose(sess.run("z", {"x": np.zeros(2, np.float32)}), [1, 1])


def test_run_resolves_a_repeated_signature_once(
    registry: klp.Registry, builds: list[object]
) -> None:
    g, x, b, y = affine(registry)
    xv, bv = np.ones((2, 3), np.float32), np.zeros(3, np.float32)
    with kl.Session(g) as sess:
        for _ in range(3):
            sess.run(y, {x: xv, b: bv})
        assert builds == [y]
        for _ in range(3):
            sess.run([y, "x:0"], {x: xv, b: bv})
        assert builds == [y, [y, "x:0"]]
        sess.run(y, {b: bv, x: xv})  # another feed order: another plan, same result
        assert len(builds) == 3
        for _ in range(2):  # a flat dict: its keys and values are the key
            out = sess.run({"y": y}, {x: xv, b: bv})
        assert len(builds) == 4
        again = sess.run({"y": y}, {x: xv, b: bv})
        assert again is not out and again["y"] is not out["y"]  # new results each run
        sess.run({"z": y}, {x: xv, b: bv})  # other keys: another plan
        assert len(builds) == 5
        for _ in range(2):  # nested (its whole structure would have to be the key)
            sess.run({"y": [y]}, {x: xv, b: bv})
        assert len(builds) == 7
        sess.run(y, {x: xv, b: bv}, targets=["w"])  # targets: not cached
        assert len(builds) == 8
        with g.as_default():
            kl.ops.neg(y, name="later")  # the graph grew: names may resolve differently
        sess.run(y, {x: xv, b: bv})
        assert len(builds) == 9
    np.testing.assert_allclose(out["y"], xv @ W)


def test_a_tuple_and_a_list_of_the_same_fetches_keep_their_types(registry: klp.Registry) -> None:
    g, x, b, y = affine(registry)
    feeds = {x: np.ones((1, 3), np.float32), b: np.zeros(3, np.float32)}
    with kl.Session(g) as sess:
        as_list = sess.run([y], feeds)
        as_tuple = sess.run((y,), feeds)
        again = sess.run([y], feeds)
    assert type(as_list) is list and type(as_tuple) is tuple and type(again) is list
    np.testing.assert_allclose(as_tuple[0], np.ones((1, 3)) @ W)


def test_signature_keys(registry: klp.Registry) -> None:
    g, x, _, y = affine(registry)
    assert signature_key(g, y, {x: 1}) == (len(g), y, (x,))
    assert signature_key(g, "y", None) == (len(g), "y", ())
    assert signature_key(g, [y, "b"], {}) == (len(g), (list, y, "b"), ())
    assert signature_key(g, (y,), {}) != signature_key(g, [y], {})
    assert signature_key(g, {"y": y}, {}) == (len(g), (dict, ("y",), (y,)), ())
    assert signature_key(g, {"y": [y]}, {}) is None  # nested
    assert signature_key(g, collections.OrderedDict(y=y), {}) is None  # (rebuilt as its type)
    assert signature_key(g, [y, [y]], {}) is None  # nested: its structure is not in the key
    assert signature_key(g, y.node, {}) is None
    assert signature_key(g, y, collections_mapping()) is None


def collections_mapping() -> Any:
    import types

    return types.MappingProxyType({})


def test_the_plan_cache_is_bounded(registry: klp.Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernloom.runtime import session as session_module

    monkeypatch.setattr(session_module, "_MAX_CACHED_PLANS", 3)
    g = kl.Graph(registry)
    with g.as_default():
        tensors = [kl.constant(np.float32(i), name=f"c{i}") for i in range(5)]
    with kl.Session(g) as sess:
        for i, t in enumerate(tensors):
            assert sess.run(t) == i
            assert len(sess._plans) <= 3


def test_many_threads_share_cached_plans(registry: klp.Registry) -> None:
    g, x, b, y = affine(registry)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(8)]
    errors: list[BaseException] = []
    with kl.Session(g, kl.SessionConfig(inter_op_threads=2)) as sess:
        run = sess.make_callable(y, [x, b])

        def work(xv: np.ndarray) -> None:
            try:
                for i in range(50):
                    bv = np.full(3, i, np.float32)
                    got = run(xv, bv) if i % 2 else sess.run(y, {x: xv, b: bv})
                    np.testing.assert_allclose(got, xv @ W + bv, rtol=1e-5, atol=1e-5)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(xv,)) for xv in inputs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert not errors, errors[0]


def test_check_feed_is_the_one_place_feeds_are_explained(registry: klp.Registry) -> None:
    _, x, _, _ = affine(registry)
    assert run_plan.check_feed(x, [[1, 2, 3]]).dtype == np.float32
    with pytest.raises(kl.InvalidArgumentError, match=r"feed for 'x:0' .* is a kl.Tensor"):
        run_plan.check_feed(x, x)
