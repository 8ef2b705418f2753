"""The cyclic collector is held off while a session compiles a signature, and left as it
was found afterwards -- also when the compile fails, and when the caller had turned it
off itself."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import kernloom as kl
from kernloom.framework.gc_pause import gc_paused
from kernloom.runtime import session as session_module


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_off_while_a_signature_compiles(
    monkeypatch: pytest.MonkeyPatch, collector_on: None
) -> None:
    seen: list[bool] = []
    original = session_module.build_step_graph

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        if len(seen) > 1:
            raise RuntimeError("a compile that fails")
        return original(*args, **kwargs)

    monkeypatch.setattr(session_module, "build_step_graph", spy)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        y = kl.ops.tanh(x)
    with kl.Session(g) as sess:
        np.testing.assert_allclose(sess.run(y, {x: [0.5, -1.0]}), np.tanh([0.5, -1.0]), 1e-6)
        assert gc.isenabled()  # on again after the compile
        with pytest.raises(RuntimeError, match="a compile that fails"):
            sess.run([y, x], {x: [0.5, -1.0]})  # another signature: compiled, and failing
        assert gc.isenabled()
    assert seen == [False, False]


def test_a_paused_block_restores_the_collector_as_it_found_it(collector_on: None) -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), gc_paused():
        raise ZeroDivisionError
    assert gc.isenabled()
    gc.disable()  # the caller's own choice is kept
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
