# Two entry points (see README.md):
#   make serve   set everything up, build the diagrams and serve the docs site on 127.0.0.1:8000
#   make test    set everything up and run the whole test suite
# torch is pinned here so that a fresh machine takes the CPU build; pyproject.toml states the supported range.

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
PYTHON_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: setup system-deps test serve site examples bench clean test-quick test-lowest lint

setup: system-deps $(PYTHON_STAMP) $(NODE_STAMP)

system-deps:
	bash scripts/system-deps.sh

$(PYTHON_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[svg,test,docs,bench,explorer,lint]"
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

test: setup
	$(PY) -m pytest

# The quick tests against the lowest versions pyproject.toml allows (scripts/lowest_versions.py).
test-lowest: setup
	$(PY) scripts/lowest_versions.py .lowest
	GRADEXPORT_QUICK=1 PYTHONPATH=.lowest $(PY) -m pytest -q -m "not slow and not browser" -p no:cacheprovider

# Lint and type checks: ruff (rules in pyproject.toml) and mypy on the package.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# For development: skips the tests marked slow (torch.compile, deep graphs, site builds) and browser,
# and draws a fifth of each property test's examples (tests/examples_budget.py).
test-quick: setup
	GRADEXPORT_QUICK=1 $(PY) -m pytest -m "not slow and not browser"

examples: setup
	$(PY) -m gradexport examples/blog.py:multiply_then_sum --format dot,svg,mermaid,json --output out/multiply_then_sum
	$(PY) -m gradexport examples/blog.py:unbind_then_add --format dot,svg,mermaid,json --output out/unbind_then_add

site: setup
	$(VENV)/bin/mkdocs build --strict

serve: setup
	$(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

bench: setup
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) node_modules site out

# Rebuild the interactive viewer's script (gradexport/viewer/viewer.bundle.js, committed) from gradexport/viewer/src.
.PHONY: viewer
viewer: $(NODE_STAMP)
	npm run build-viewer
