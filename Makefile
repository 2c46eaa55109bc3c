# Two fresh-machine entry points: `make quickstart` and `make test`.
# torch is installed first and pinned: any other torch spec pulls several GB of CUDA wheels. --no-compile: modules
# are byte-compiled when first imported, not all of them at install (half the install's time: 88 s -> 32 s).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist processes running test files side by side (logical: one per CPU this process may use). Files are
# handed out in collection order (tests/conftest.py puts the long ones first), not xdist's default of most tests
# first, which left the long single-test files for the end.
TEST_WORKERS ?= logical
# Bytecode is written on first import and kept: where the environment sets PYTHONDONTWRITEBYTECODE (as some
# containers do), every process (each Ray worker, each subprocess of a test) would compile torch, transformers and
# Ray from source again, twice the suite's time with packages installed --no-compile.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: quickstart test lint bench findings clean

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "sdp-sweep needs Python >= 3.11; $(PY) is " + sys.version.split()[0] + ": make PY=python3.11 ...")'
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile --upgrade pip
	$(BIN)/python -m pip install -q --no-compile torch==2.13.0
	$(BIN)/python -m pip install -q --no-compile -e '.[dev]'
	touch $(STAMP)

quickstart: $(STAMP)
	@echo "sdp-sweep is installed in $(VENV): 'source $(VENV)/bin/activate' puts it on this shell's PATH"
	$(BIN)/sdp-sweep run sweeps/quickstart.yaml --out reports/quickstart --overwrite

findings: $(STAMP)
	$(BIN)/sdp-sweep run sweeps/findings.yaml --out reports/findings --overwrite

# ruff's lint rules and mypy's types ([tool.ruff], [tool.mypy] in pyproject.toml): `make test` runs them first
lint: $(STAMP)
	$(BIN)/ruff check sdp_core tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

bench: $(STAMP)
	for b in benchmarks/*.py; do $(BIN)/python -m benchmarks.$$(basename $$b .py) || exit 1; done

clean:
	rm -rf $(VENV) reports/*/ .pytest_cache .cache/mypy
