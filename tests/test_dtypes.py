import pickle

import numpy as np
import pytest
from pydantic import BaseModel

import kernloom as kl


def test_every_dtype_round_trips_through_numpy_and_its_name() -> None:
    for dtype in kl.all_dtypes():
        assert kl.as_dtype(dtype.numpy_dtype) is dtype
        assert kl.as_dtype(dtype.name) is dtype
        assert kl.as_dtype(np.zeros(2, dtype.numpy_dtype).dtype) is dtype
        assert dtype.itemsize == np.dtype(dtype.numpy_dtype).itemsize


def test_categories() -> None:
    assert kl.float32.is_floating and not kl.float32.is_integer
    assert kl.uint8.is_integer and kl.uint8.is_unsigned
    assert kl.int64.is_integer and not kl.int64.is_unsigned
    assert kl.bool_.is_bool and not kl.bool_.is_numeric
    assert kl.complex64.is_complex and not kl.complex64.is_floating


def test_aliases_follow_tensorflow_and_numpy() -> None:
    assert kl.as_dtype("float") is kl.float32  # tf.float
    assert kl.as_dtype("double") is kl.float64
    assert kl.as_dtype(float) is kl.float64  # numpy's reading of the Python type
    assert kl.as_dtype(np.int32) is kl.int32
    assert kl.as_dtype(np.dtype(">f4")) is kl.float32


def test_unknown_names_suggest_the_nearest() -> None:
    with pytest.raises(kl.InvalidArgumentError, match=r"'flaot32'.*Did you mean 'float32'"):
        kl.as_dtype("flaot32")
    with pytest.raises(kl.InvalidArgumentError, match="no kernloom equivalent"):
        kl.as_dtype(np.dtype("U4"))
    with pytest.raises(kl.InvalidArgumentError, match="cannot interpret"):
        kl.as_dtype(object())


def test_interned_through_pickle_and_pydantic() -> None:
    assert pickle.loads(pickle.dumps(kl.float16)) is kl.float16

    class Model(BaseModel):
        dtype: kl.DType

    model = Model(dtype="int16")  # type: ignore[arg-type]
    assert model.dtype is kl.int16
    assert model.model_dump_json() == '{"dtype":"int16"}'
    assert Model.model_validate_json('{"dtype":"bool"}').dtype is kl.bool_
