"""Complex kernels with infinite or NaN parts give TensorFlow's answers (tensorflow-cpu
2.21, worked through by hand from Eigen's formulas below), and numpy's on finite values.

- product (schoolbook): (M + inf j)^2 = (M*M - inf*inf) + (M*inf + inf*M) j = nan + inf j
  (numpy's complex128 product gives -inf + inf j);
- quotient (Eigen's pdiv_complex: the divisor scaled by the larger magnitude of its parts):
  1 / (inf + 0j) scales by inf, inf/inf is nan: nan + nan j (numpy: 0);
- rsqrt: 0 where a part is infinite; expm1(inf + 0j) = (inf - 2 inf sin(0)^2) + inf sin(0) j
  = nan + nan j; sigmoid(-inf + 0.5j) = 1 / (1 + inf * e^{-0.5j}) = 0 (Annex G division);
- log1p(-1.5 + M j) = x * log(1 + x) / x: real part log|x| = log M, imaginary part only
  what survives the flushed tiny terms (1.5 * log(M) / M), not atan2.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernloom as kl
from kernloom_cpu_numpy.denormals import FLUSH_SUPPORTED

INF, NAN = math.inf, math.nan
M64 = np.finfo(np.float64).max


def run(op: str, *inputs: Any, dtype: Any = np.complex128) -> complex:
    graph = kl.Graph()
    with graph.as_default():
        args = [kl.constant(np.array([v], dtype)) for v in inputs]
        out = getattr(kl.ops, op)(*args)
    with kl.Session(graph, config=kl.SessionConfig(graph_optimizer=False)) as session:
        return complex(session.run(out)[0])


def same(got: complex, want: complex) -> bool:
    return all(
        (math.isnan(a) and math.isnan(b)) or a == b
        for a, b in ((got.real, want.real), (got.imag, want.imag))
    )


@pytest.mark.parametrize(
    ("op", "inputs", "want"),
    [
        ("square", [complex(M64, INF)], complex(NAN, INF)),
        ("mul", [complex(M64, INF), complex(M64, INF)], complex(NAN, INF)),
        ("squared_difference", [complex(1, INF), complex(0, 0)], complex(INF, NAN)),
        ("reciprocal", [complex(INF, 0)], complex(NAN, NAN)),
        ("real_div", [complex(1, 0), complex(INF, 0)], complex(NAN, NAN)),
        ("div", [complex(2, 4), complex(0, 2)], complex(2, -1)),
        ("div_no_nan", [complex(INF, 1), complex(0, 0)], complex(0, 0)),
        ("rsqrt", [complex(M64, INF)], complex(0, 0)),
        ("rsqrt", [complex(0, 0)], complex(INF, NAN)),
        ("rsqrt", [complex(-0.5, -0.0)], complex(0, -math.sqrt(2))),  # numpy: +sqrt(2) j
        ("expm1", [complex(INF, 0)], complex(NAN, NAN)),
        ("sigmoid", [complex(-INF, 0.5)], complex(0, 0)),
    ],
)
def test_infinite_and_nan_parts_follow_tensorflow(
    op: str, inputs: list[complex], want: complex
) -> None:
    got = run(op, *inputs)
    assert same(got, want), (got, want)


@pytest.mark.skipif(not FLUSH_SUPPORTED, reason="TensorFlow's answer needs flushed subnormals")
def test_log1p_of_a_huge_imaginary_part_keeps_only_the_unflushed_term() -> None:
    got = run("log1p", complex(-1.5, M64))
    assert got.real == pytest.approx(math.log(M64), rel=1e-15)  # 709.78...
    assert got.imag == pytest.approx(1.5 * math.log(M64) / M64, rel=1e-12)  # 5.9e-306


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.complex_numbers(min_magnitude=1e-2, max_magnitude=20, allow_subnormal=False),
        min_size=2,
        max_size=2,
        # log1p's pole; the negative real axis, where Eigen's rsqrt reads -0j as +0j
    ).filter(lambda v: abs(v[0] + 1) > 1e-2 and v[0].imag != 0)
)
def test_finite_values_agree_with_numpy(values: list[complex]) -> None:
    x, y = values
    for op, reference in (
        ("mul", x * y),
        ("real_div", x / y),
        ("square", x * x),
        ("squared_difference", (x - y).conjugate() * (x - y)),
        ("reciprocal", 1 / x),
        ("rsqrt", 1 / np.sqrt(x)),
        ("expm1", np.expm1(x)),
        ("sigmoid", 1 / (1 + np.exp(-x))),
        ("log1p", np.log1p(x)),
    ):
        inputs = [x, y] if op in ("mul", "real_div", "squared_difference") else [x]
        got = run(op, *inputs)
        assert abs(got - reference) <= 1e-9 * max(1.0, abs(reference)), op
