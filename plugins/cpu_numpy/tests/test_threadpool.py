"""parallel_for: shards cover the range exactly once, in parallel, and errors surface."""

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernloom_cpu_numpy import IntraOpPool


@pytest.fixture(scope="module")
def pool() -> IntraOpPool:
    return IntraOpPool(4)


@settings(max_examples=60, deadline=None)
@given(total=st.integers(0, 500), min_shard=st.integers(1, 64))
def test_shards_cover_the_range_exactly_once(pool: IntraOpPool, total: int, min_shard: int) -> None:
    seen = [0] * total
    shards: list[tuple[int, int]] = []
    lock = threading.Lock()

    def work(start: int, end: int) -> None:
        with lock:
            shards.append((start, end))
        for i in range(start, end):
            seen[i] += 1

    pool.parallel_for(total, work, min_shard_size=min_shard)
    assert seen == [1] * total
    assert len(shards) <= pool.num_threads
    assert all(end - start >= min(min_shard, total) for start, end in shards)


def test_work_really_runs_on_several_threads(pool: IntraOpPool) -> None:
    barrier = threading.Barrier(4, timeout=10)  # only passes if 4 shards run at once
    names: set[str] = set()

    def work(start: int, end: int) -> None:
        names.add(threading.current_thread().name)
        barrier.wait()

    pool.parallel_for(4, work)
    assert len(names) == 4


def test_the_first_error_is_raised_after_every_shard_finished(pool: IntraOpPool) -> None:
    finished: list[int] = []

    def work(start: int, end: int) -> None:
        if start == 0:
            raise ValueError("shard 0 failed")
        finished.append(start)

    with pytest.raises(ValueError, match="shard 0 failed"):
        pool.parallel_for(4, work)
    assert sorted(finished) == [1, 2, 3]


def test_nested_calls_run_inline_instead_of_deadlocking() -> None:
    pool = IntraOpPool(2)
    total = [0]
    lock = threading.Lock()

    def inner(start: int, end: int) -> None:
        with lock:
            total[0] += end - start

    def outer(start: int, end: int) -> None:
        pool.parallel_for(100, inner)

    pool.parallel_for(2, outer)
    assert total[0] == 200
    pool.close()


def test_thread_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="intra_op_threads must be >= 1"):
        IntraOpPool(0)
