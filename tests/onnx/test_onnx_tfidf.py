"""TfIdfVectorizer on integer tokens: every mode with and without weights, n-gram lengths
and skip counts, 1-D and 2-D inputs of int32 and int64, batches known only at run time,
inputs shorter than an n-gram, checked against onnx's reference evaluator; and the import
errors for what is refused, which must name the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import AttributeProto, TensorProto, helper
from onnx_helpers import FLOAT, check_against_oracle, model

import kernloom.onnx as ko

INT32 = TensorProto.INT32
INT64 = TensorProto.INT64

# Unigrams 2..5, then bigrams, then trigrams (ngram_counts: where each length starts).
POOL = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 2, 3, 4, 5, 6, 7, 5, 6]
COUNTS = [0, 4, 13]
INDEXES = list(range(10))  # 4 unigrams, 4 bigrams + a partial one dropped, 2 trigrams
WEIGHTS = [0.5, 1.25, 2.0, 3.0, 0.75, 1.5, 2.5, 0.1, 4.0, 0.3]


def _tfidf(
    dtype: int,
    shape: list[int | str | None],
    *,
    mode: str = "TF",
    low: int = 1,
    high: int = 2,
    skip: int = 0,
    weights: list[float] | None = None,
    **overrides: Any,
) -> Any:
    attrs: dict[str, Any] = {
        "mode": mode,
        "min_gram_length": low,
        "max_gram_length": high,
        "max_skip_count": skip,
        "ngram_counts": COUNTS,
        "ngram_indexes": INDEXES,
        "pool_int64s": POOL,
    }
    if weights:
        attrs["weights"] = weights
    attrs.update(overrides)
    attrs = {k: v for k, v in attrs.items() if v is not None}
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", **attrs)
    if weights == []:  # present but empty: the reference evaluator needs the attribute
        node.attribute.append(helper.make_attribute("weights", [], attr_type=AttributeProto.FLOATS))
    return model([node], {"x": (dtype, shape)}, {"y": (FLOAT, None)}, opset=9)  # type: ignore[dict-item]


def _tokens(shape: tuple[int, ...], dtype: type[np.integer[Any]], seed: int = 0) -> Any:
    return np.random.default_rng(seed).integers(1, 9, size=shape).astype(dtype)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weights"])
@pytest.mark.parametrize(("low", "high"), [(1, 1), (1, 2), (2, 2), (1, 3), (2, 3), (3, 3)])
@pytest.mark.parametrize("skip", [0, 1, 3])
def test_modes_lengths_and_skips(mode: str, weighted: bool, low: int, high: int, skip: int) -> None:
    weights = WEIGHTS if weighted else []
    proto = _tfidf(INT64, [3, 12], mode=mode, low=low, high=high, skip=skip, weights=weights)
    for seed in range(3):
        check_against_oracle(proto, {"x": _tokens((3, 12), np.int64, seed)})


@pytest.mark.parametrize(
    ("dtype", "np_dtype"), [(INT32, np.int32), (INT64, np.int64)], ids=["int32", "int64"]
)
@pytest.mark.parametrize("shape", [(16,), (4, 16)], ids=["1d", "2d"])
def test_ranks_and_dtypes(dtype: int, np_dtype: Any, shape: tuple[int, ...]) -> None:
    proto = _tfidf(dtype, list(shape), mode="TFIDF", low=1, high=3, skip=2, weights=WEIGHTS)
    check_against_oracle(proto, {"x": _tokens(shape, np_dtype, 7)})


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_without_a_weights_attribute(mode: str) -> None:
    # The reference evaluator needs the attribute (empty or not): onnxruntime checks this,
    # on a pool of whole n-grams (it refuses a partial one, which the reference drops).
    whole = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 2, 3, 4, 5, 6, 7, 5]
    proto = _tfidf(
        INT64, [3, 12], mode=mode, low=1, high=3, skip=2, pool_int64s=whole, ngram_counts=[0, 4, 12]
    )
    check_against_oracle(proto, {"x": _tokens((3, 12), np.int64)}, oracle="onnxruntime")


def test_batch_known_only_at_run_time() -> None:
    proto = _tfidf(INT32, ["n", 9], low=1, high=3, skip=1)
    for batch in (1, 5):
        check_against_oracle(proto, {"x": _tokens((batch, 9), np.int32, batch)})


@pytest.mark.parametrize("width", [0, 1, 2, 3])
@pytest.mark.parametrize("shape", ["1d", "2d"])
def test_inputs_shorter_than_an_ngram(width: int, shape: str) -> None:
    dims = (width,) if shape == "1d" else (2, width)
    proto = _tfidf(INT64, list(dims), mode="TF", low=2, high=3, skip=2)
    check_against_oracle(proto, {"x": _tokens(dims, np.int64, width)})


def test_no_pool_ngram_in_range_gives_zeros() -> None:
    proto = _tfidf(INT64, ["n", 6], low=4, high=5)
    check_against_oracle(proto, {"x": _tokens((2, 6), np.int64)})


def test_repeated_ngrams_and_shared_slots() -> None:
    # The bigram (2, 3) is listed twice: only its last listing counts. Two n-grams share
    # output slot 1, and slot 3 belongs to no n-gram counted.
    proto = _tfidf(
        INT64,
        [2, 10],
        low=1,
        high=2,
        skip=1,
        pool_int64s=[2, 3, 2, 3, 4, 5, 2, 3],
        ngram_counts=[0, 2],
        ngram_indexes=[0, 1, 4, 1, 2],
    )
    x = np.asarray([[2, 3, 2, 3, 4, 5, 2, 3, 3, 2], [4, 2, 5, 3, 2, 3, 9, 9, 2, 2]], np.int64)
    check_against_oracle(proto, {"x": x})


def test_tokens_outside_int32_in_the_pool() -> None:
    proto = _tfidf(
        INT32,
        [8],
        low=1,
        high=2,
        pool_int64s=[1, 2**40, 3, 1, 3],
        ngram_counts=[0, 3],
        ngram_indexes=[0, 1, 2, 3],
    )
    check_against_oracle(proto, {"x": np.asarray([1, 3, 1, 3, 0, 1, 1, 3], np.int32)})


def _refused(proto: Any, message: str) -> None:
    where = r"'tfidf' \(TfIdfVectorizer, opset 9\)"
    with pytest.raises(ko.OnnxImportError, match=rf"{where}.*{message}"):
        ko.InferenceSession(proto.SerializeToString())


@pytest.mark.parametrize(
    ("shape", "overrides", "message"),
    [
        ([4], {"pool_int64s": None, "pool_strings": ["a", "b"]}, "kernloom has no string dtype"),
        ([4], {"pool_int64s": None}, "pool_int64s is required"),
        ([4], {"mode": "BM25"}, "mode 'BM25' is not one of TF, IDF, TFIDF"),
        ([4], {"ngram_indexes": [0, 1, 2]}, "ngram_indexes has 3 entries"),
        ([4], {"ngram_indexes": [0, -1, 2]}, "non-negative"),
        ([4], {"weights": [1.0, 2.0]}, "weights has 2 entries; the output has 10"),
        ([4, None], {}, r"last dimension \(C\) must be known"),
        ([2, 2, 4], {}, r"must be \[C\] or \[N, C\]"),
    ],
)
def test_refusals(shape: list[int | None], overrides: dict[str, Any], message: str) -> None:
    _refused(_tfidf(INT64, list(shape), **overrides), message)


def test_float_tokens_are_refused() -> None:
    _refused(_tfidf(FLOAT, [4]), "float32 tokens are not supported")


def test_string_tokens_are_refused() -> None:
    # Refused at the graph input, before the node: no kernloom tensor can hold them.
    proto = _tfidf(TensorProto.STRING, [4], pool_int64s=None, pool_strings=["a", "b"])
    with pytest.raises(
        ko.OnnxImportError, match="graph input 'x': ONNX element type STRING has no kernloom dtype"
    ):
        ko.InferenceSession(proto.SerializeToString())


def test_a_length_with_no_pool_ngrams() -> None:
    # No unigrams (ngram_counts starts bigrams at 0): bigrams counted at every skip.
    proto = _tfidf(
        INT64,
        [2, 9],
        low=1,
        high=2,
        skip=2,
        pool_int64s=[2, 3, 3, 2, 4, 4],
        ngram_counts=[0, 0],
        ngram_indexes=[2, 0, 1],
    )
    check_against_oracle(proto, {"x": _tokens((2, 9), np.int64, 3) % 3 + 2})
