import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

import kernloom as kl
from kernloom import TensorShape

dims = st.one_of(st.none(), st.integers(0, 5))
shapes = st.one_of(st.none(), st.lists(dims, max_size=4)).map(TensorShape)


def test_known_and_unknown() -> None:
    s = TensorShape([2, None, 3])
    assert s.rank == 3 and not s.is_fully_defined() and s.num_elements() is None
    assert str(s) == "(2, ?, 3)" and repr(s) == "TensorShape([2, None, 3])"
    assert TensorShape([2, 3]).num_elements() == 6
    assert TensorShape([]).num_elements() == 1 and TensorShape.scalar().rank == 0
    assert TensorShape(None).rank is None and str(TensorShape(None)) == "<unknown>"
    assert TensorShape([-1, 4]) == [None, 4]  # -1 is "unknown", as in shape lists
    assert TensorShape([2, 3]).as_tuple() == (2, 3)
    assert TensorShape([2, 3])[1:] == TensorShape([3])


@pytest.mark.parametrize("bad", [[-2], [1.5], ["a"], [True], "23"])
def test_bad_dimensions_are_rejected(bad: object) -> None:
    with pytest.raises(kl.InvalidArgumentError):
        TensorShape(bad)  # type: ignore[arg-type]


def test_merge_errors_name_both_shapes() -> None:
    with pytest.raises(kl.InvalidArgumentError, match=r"\(2, 3\) and \(2, 4\)"):
        TensorShape([2, 3]).merge_with([2, 4])
    with pytest.raises(kl.InvalidArgumentError, match="must have rank 2"):
        TensorShape([1, 2, 3]).with_rank(2)
    with pytest.raises(kl.InvalidArgumentError, match="not fully defined"):
        TensorShape([None]).as_tuple()


@given(shapes, shapes)
def test_merge_is_symmetric_and_compatible_with_both(a: TensorShape, b: TensorShape) -> None:
    assert a.is_compatible_with(b) == b.is_compatible_with(a)
    if a.is_compatible_with(b):
        merged = a.merge_with(b)
        assert merged == b.merge_with(a)
        assert merged.is_compatible_with(a) and merged.is_compatible_with(b)
        # The merge knows at least as much as either input.
        if merged.rank is not None:
            for i in range(merged.rank):
                assert merged[i] == (a[i] if a[i] is not None else b[i])
    else:
        with pytest.raises(kl.InvalidArgumentError):
            a.merge_with(b)


@given(st.lists(st.integers(0, 5), max_size=4), st.lists(st.integers(0, 5), max_size=4))
def test_fully_defined_shapes_are_compatible_only_when_equal(a: list[int], b: list[int]) -> None:
    assert TensorShape(a).is_compatible_with(b) == (a == b)


def test_pydantic_round_trip() -> None:
    class Model(BaseModel):
        shape: TensorShape

    m = Model(shape=[2, None])  # type: ignore[arg-type]
    assert m.shape == TensorShape([2, None])
    assert m.model_dump_json() == '{"shape":[2,null]}'
    assert Model.model_validate_json('{"shape":null}').shape.rank is None
