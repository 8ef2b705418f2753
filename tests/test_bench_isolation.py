"""benchmarks/isolation.py: one interpreter per runtime, rounds interleaved across them.

The workloads here are tiny scripts written for the test; what they report (process ids,
their environment, CLOCK_MONOTONIC, which every process on the machine shares) is the
independent evidence of where and in which order the rounds ran. Nothing is timed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

WORKLOADS = textwrap.dedent(
    """
    import os
    import time

    BLAS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

    def clock(tag=""):
        # Each round's "time" is the moment it ran, on the machine-wide monotonic clock.
        info = {"pid": os.getpid(), "tag": tag, "extra": os.environ.get("SUITE_TEST_EXTRA")}
        info["blas"] = [os.environ.get(name) for name in BLAS]
        return time.monotonic, info

    def nap():
        def measure():
            started = time.perf_counter()
            time.sleep(0.001)
            return time.perf_counter() - started
        return measure, {}

    def crash_in_round(round_):
        count = 0
        def measure():
            nonlocal count
            count += 1
            if count == round_:
                print("about to crash", flush=True)
                os._exit(3)
            return 0.0
        return measure, {}

    def broken_setup():
        raise ValueError("the weights file is missing")

    def not_a_time():
        return (lambda: "fast"), {}
    """
)


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


isolation = _load("isolation")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "workloads.py"
    path.write_text(WORKLOADS)
    return path


def child(script: Path, name: str, factory: str = "clock", **kwargs: object) -> object:
    return isolation.Child(name=name, script=script, factory=factory, **kwargs)


def test_rounds_alternate_across_children_in_the_order_given(script: Path) -> None:
    results = isolation.run_interleaved(
        [child(script, "a"), child(script, "b"), child(script, "c")], rounds=4
    )
    moments = sorted(
        (moment, name) for name, result in results.items() for moment in result.seconds
    )
    assert [name for _, name in moments] == ["a", "b", "c"] * 4
    assert list(results) == ["a", "b", "c"]


def test_each_child_is_its_own_process_with_the_blas_threads_fixed(script: Path) -> None:
    results = isolation.run_interleaved(
        [
            child(script, "one", params={"tag": "first"}, threads=1),
            child(script, "two", threads=2, env={"SUITE_TEST_EXTRA": "yes"}),
        ],
        rounds=1,
    )
    one, two = results["one"].info, results["two"].info
    assert len({one["pid"], two["pid"], os.getpid()}) == 3
    assert one["blas"] == ["1", "1", "1"] and two["blas"] == ["2", "2", "2"]
    assert one["tag"] == "first" and one["extra"] is None and two["extra"] == "yes"


def test_every_round_returns_a_time_in_seconds(script: Path) -> None:
    results = isolation.run_interleaved([child(script, "napper", "nap")], rounds=3)
    (result,) = results.values()
    assert result.name == "napper" and result.info == {}
    assert len(result.seconds) == 3
    assert all(isinstance(s, float) and s > 0 for s in result.seconds)


def test_a_child_that_crashes_is_named_with_its_round_and_output(script: Path) -> None:
    crashing = child(script, "flaky-runtime", "crash_in_round", params={"round_": 2})
    with pytest.raises(isolation.ChildFailed) as caught:
        isolation.run_interleaved([child(script, "steady"), crashing], rounds=3)
    message = str(caught.value)
    assert message.startswith("flaky-runtime: ")
    assert "round 2" in message and "exit code 3" in message and "about to crash" in message


def test_an_exception_in_setup_names_the_runtime_and_carries_the_traceback(
    script: Path,
) -> None:
    with pytest.raises(isolation.ChildFailed) as caught:
        isolation.run_interleaved(
            [child(script, "steady"), child(script, "tensorflow", "broken_setup")], rounds=1
        )
    message = str(caught.value)
    assert message.startswith("tensorflow: setup failed")
    assert "ValueError: the weights file is missing" in message and "broken_setup" in message


def test_a_missing_interpreter_is_named(script: Path, tmp_path: Path) -> None:
    python = str(tmp_path / "no-venv" / "bin" / "python")
    with pytest.raises(isolation.ChildFailed, match=r"^tf: cannot start its interpreter") as e:
        isolation.run_interleaved([child(script, "tf", python=python)], rounds=1)
    assert python in str(e.value)


def test_a_round_that_returns_no_time_is_an_error_naming_the_factory(script: Path) -> None:
    with pytest.raises(isolation.ChildFailed) as caught:
        isolation.run_interleaved([child(script, "odd", "not_a_time")], rounds=1)
    assert "odd: round 1 returned 'fast'" in str(caught.value)
    assert "not_a_time()" in str(caught.value)


def test_children_need_distinct_names(script: Path) -> None:
    with pytest.raises(ValueError, match=r"repeated: \['a'\]"):
        isolation.run_interleaved([child(script, "a"), child(script, "a")], rounds=1)
