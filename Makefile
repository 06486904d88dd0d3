# onnxgate: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# PyTorch comes from the CPU wheel on this machine's disk; a bare `torch` can pull a CUDA build.
TORCH  ?= torch==2.13.0

.PHONY: demo test test-fast lint format docs clean check-core-install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The demo exports all-MiniLM-L6-v2 from PyTorch: torch from its pinned CPU wheel first. The serve
# extra makes the README's serve example run on what the demo registered.
$(VENV)/.installed-demo: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[torch,examples,serve]'
	touch $@

# torch first, from its pinned CPU wheel, so nothing later pulls a CUDA build to satisfy "torch".
# Debian's chromium renders report.html in tests/gate (playwright drives it; no browser download).
# Node.js and npm run ONNX Runtime's JavaScript packages (tests/runners/test_js_runtimes.py).
$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-demo
	command -v chromium >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
		|| echo "chromium is not installed: the report page's browser test skips (fails with CI=true)"
	command -v node >/dev/null && command -v npm >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm; } \
		|| echo "Node.js or npm is not installed: the onnxruntime-web/-node tests skip (fail with CI=true)"
	$(BIN)/python -m pip install --quiet -e '.[test,torch,sklearn,examples]'
	touch $@

demo: $(VENV)/.installed-demo
	PATH="$(abspath $(BIN)):$$PATH" bash scripts/demo.sh

test: $(VENV)/.installed-test check-core-install
	$(BIN)/ruff check src tests tools benchmarks
	$(BIN)/ruff format --check src tests tools benchmarks
	$(BIN)/python -m pytest

# The documentation site, strict: a broken link or anchor fails. tests/test_docs.py builds it in
# `make test` too; `$(BIN)/mkdocs serve` serves it while you edit.
docs: $(VENV)/.installed-test
	$(BIN)/mkdocs build --strict --site-dir site

# CI's core-only install: a fresh venv with `pip install .` alone (no extras) in a temp folder;
# every command's --help, inspect, check and gate init run, and each command that needs an extra
# exits 3 naming it with the install line. Standard library only, so no venv is needed to run it.
check-core-install:
	$(PYTHON) tools/check_core_install.py

test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -m "not slow"

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests tools benchmarks

format: $(VENV)/.installed-test
	$(BIN)/ruff format src tests tools benchmarks
	$(BIN)/ruff check --fix src tests tools benchmarks

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache .ruff_cache
