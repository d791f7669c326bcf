# Two commands for a fresh machine: `make report` (the main job) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEPS   := $(VENV)/.packages
STAMP  := $(VENV)/.installed
OUT    ?= out/report
DOCS   ?= out/docs

.PHONY: test report docs lint typecheck pytest bench clean

# The packages: the venv, lookuplinear in editable mode and its [dev] extra, TorchRec
$(DEPS): pyproject.toml constraints.txt setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# the package without its kernels (the build_ext below builds both libraries in place, side by side)
	LOOKUPLINEAR_NO_C=1 $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	# TorchRec without its requirements, which name FBGEMM's CUDA build (docs/distributed.md)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt --no-deps torchrec==1.8.0
	touch $(DEPS)

# setup.py, the C and C++ sources and their ABI version (VERSION in ops/_clib.py): a change rebuilds
# the C row kernels and the C++ operators (built against the installed torch; without a compiler
# both are skipped)
$(STAMP): $(DEPS) setup.py src/lookuplinear/ops/_clib.py $(wildcard src/lookuplinear/ops/csrc/*)
	$(BIN)/python setup.py --quiet build_ext --inplace --parallel 2
	touch $(STAMP)

# the site is built with warnings as errors by tests/test_apidocs.py, inside pytest.
# Two jobs: ruff, lint-imports and mypy need only the packages, so they run while the C++
# operators compile (one core of the two, once the C kernels are built), then beside pytest
test:
	$(MAKE) --no-print-directory -j2 pytest lint typecheck

lint: $(DEPS)
	$(BIN)/ruff check src tests benchmarks examples conftest.py docs/conf.py
	$(BIN)/lint-imports --no-cache

typecheck: $(DEPS)
	$(BIN)/mypy

# then the lookups, their gradients, the optimizers' row updates and errors once more as an
# install without a compiler runs them (LOOKUPLINEAR_NO_C=1: neither library loaded, the
# operators registered from Python, torch ops for the kernels): the two sides give the same
# results.
# OMP_WAIT_POLICY=passive: two workers, each with torch's threads, share the cores; an OpenMP
# thread waiting for work sleeps instead of spinning on a core the other worker needs (the same
# threads and the same results, only the wait changes)
pytest: $(STAMP)
	OMP_WAIT_POLICY=passive $(BIN)/python -m pytest -n 2 -q
	OMP_WAIT_POLICY=passive LOOKUPLINEAR_NO_C=1 $(BIN)/python -m pytest -n 2 -q -p no:cacheprovider $(FALLBACK_TESTS)

FALLBACK_TESTS := tests/test_library.py tests/test_rowops.py tests/test_rowgrad.py \
	tests/test_layer.py tests/test_embedding_bag.py tests/test_embedding.py tests/test_optim.py \
	tests/test_errors.py tests/test_kernels_inputs.py tests/test_nosync.py tests/test_cpp_ops.py

# The site: README.md, docs/*.md and the API reference from the docstrings, warnings as errors
# (-E: read every page again, so a changed docstring is never served from the cache)
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -E -q -b html docs $(DOCS)

report: $(STAMP)
	$(BIN)/lookuplinear report --out $(OUT)

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache .hypothesis
