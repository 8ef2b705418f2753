# Two commands that work on a fresh clone (see README.md):
#   make demo   set up .venv and run the main job
#   make test   set up .venv with the test tools and run every check
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check

PLUGINS := plugins/cpu_numpy
# The GPU plugins: installed for the tests (and `make bench`). torch is pinned to the
# local CPU build first, so that the plugin's `torch>=2.3` never downloads a CUDA one.
GPU_PLUGINS := plugins/gpu_torch plugins/gpu_cupy
TORCH := torch==2.13.0
LINT_PATHS := core plugins tests benchmarks examples conftest.py
MYPY_PATHS := core/kernloom plugins/cpu_numpy/kernloom_cpu_numpy \
	plugins/gpu_torch/kernloom_gpu_torch plugins/gpu_cupy/kernloom_gpu_cupy benchmarks

.PHONY: demo test test-all test-gpu test-tf lint typecheck pytest pytest-all kit bench bench-suite clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamp files make re-runs fast; they are redone when a pyproject changes.
$(VENV)/.demo-installed: $(BIN)/python pyproject.toml $(addsuffix /pyproject.toml,$(PLUGINS))
	$(PIP) install -q -e . $(addprefix -e ,$(PLUGINS))
	touch $@

$(VENV)/.test-installed: $(VENV)/.demo-installed $(addsuffix /pyproject.toml,$(GPU_PLUGINS))
	$(PIP) install -q -e ".[test]"
	$(PIP) install -q "$(TORCH)"
	$(PIP) install -q $(addprefix -e ,$(GPU_PLUGINS))
	touch $@

demo: $(VENV)/.demo-installed
	$(BIN)/kernloom plugins
	$(BIN)/kernloom demo

lint: $(VENV)/.test-installed
	$(BIN)/ruff check --output-format concise $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

typecheck: $(VENV)/.test-installed
	$(BIN)/mypy $(MYPY_PATHS)

# `make test` leaves out the tests marked onnx_full (the whole ONNX node suite, the
# largest real models); `make test-all` runs them too.
pytest: $(VENV)/.test-installed
	$(BIN)/python -m pytest -m "not onnx_full"

pytest-all: $(VENV)/.test-installed
	$(BIN)/python -m pytest

test: lint typecheck pytest

# On a machine with an NVIDIA GPU: the GPU plugins' tests on the real GPU, the whole kit
# included (`make test` hides real GPUs, so that every machine tests the same devices).
test-gpu: $(VENV)/.test-installed
	KERNLOOM_TEST_GPU=1 KERNLOOM_FULL_KIT=1 $(BIN)/python -m pytest plugins/gpu_torch/tests \
		plugins/gpu_cupy/tests tests/test_gpu_plugins.py

# The whole conformance kit (every case of the table) on our three devices; `make test` runs
# a representative subset of it.
kit: $(VENV)/.test-installed
	KERNLOOM_FULL_KIT=1 $(BIN)/python -m pytest -q plugins/cpu_numpy/tests/test_conformance.py \
		plugins/gpu_torch/tests/test_conformance.py plugins/gpu_cupy/tests/test_conformance.py

# The differential suite against TensorFlow (tests/tf_diff; docs/tensorflow_fidelity.md):
# a venv of its own, outside `make test`, with the CPU build of TensorFlow pinned.
TF_VENV ?= .venv-tf
TENSORFLOW := tensorflow-cpu==2.21.0

$(TF_VENV)/.tf-installed: pyproject.toml plugins/cpu_numpy/pyproject.toml
	$(PYTHON) -m venv $(TF_VENV)
	$(TF_VENV)/bin/python -m pip --disable-pip-version-check install -q "$(TENSORFLOW)"
	$(TF_VENV)/bin/python -m pip --disable-pip-version-check install -q -e ".[test]" -e plugins/cpu_numpy
	touch $@

test-tf: $(TF_VENV)/.tf-installed
	$(TF_VENV)/bin/python -m pytest tests/tf_diff -q -s -W ignore::DeprecationWarning

test-all: lint typecheck pytest-all

clean:
	rm -rf $(VENV) $(TF_VENV) build dist .mypy_cache .ruff_cache .pytest_cache

bench: $(VENV)/.test-installed
	$(BIN)/python benchmarks/bench_foundation.py
	$(BIN)/python benchmarks/bench_kernels.py
	$(BIN)/python benchmarks/bench_runtime.py
	$(BIN)/python benchmarks/bench_loop.py
	$(BIN)/python benchmarks/bench_gpu.py

# The comparison suite (benchmarks/suite.py): kernloom next to numpy direct, ONNX Runtime,
# torch and, from $(TF_VENV) or KERNLOOM_TF_PYTHON where there is one, TensorFlow 1, each in
# its own interpreter, rounds interleaved. Writes benchmarks/results/suite.json and the
# README's Performance table. About 3 minutes; run it alone on the machine.
bench-suite: $(VENV)/.test-installed
	TF_VENV=$(TF_VENV) $(BIN)/python benchmarks/suite.py --write-readme
