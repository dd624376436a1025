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

.PHONY: setup system-deps test serve site examples bench clean test-quick test-torch-oldest test-torch-newest torch-venvs dist lint

setup: system-deps $(PYTHON_STAMP) $(NODE_STAMP)

system-deps:
	bash scripts/system-deps.sh

$(PYTHON_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[svg,test,docs,bench,explorer,lint,release]"
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

test: setup
	$(PY) -m pytest

# The tests that touch torch's behaviour (node names, next_functions entries, the engine's order, saved
# tensors, error texts, hooks, compile) on the two ends of the supported range: the oldest torch with every
# other dependency at its lowest version (pyproject.toml), and requirements/torch-newest.txt. Each end is a venv
# beside .venv holding a CUDA build of torch from the registry (about 5 GB, minutes to install) that sees
# .venv's packages for the rest (scripts/torch_venv.py). The suite's other tests draw pictures, build the
# site or drive a browser from graphs these already cover.
TORCH_RANGE_TESTS := tests/test_torch_internals.py tests/test_graph.py tests/test_roots.py tests/test_streaming.py \
	tests/test_formats_dot.py tests/test_formats_json.py tests/test_formats_mermaid.py tests/test_formats_svg.py \
	tests/test_json_schema.py tests/test_export_write.py tests/test_modules.py tests/test_module_boxes.py \
	tests/test_source_lines.py tests/test_saved_memory.py tests/test_unreached.py tests/test_nonfinite.py \
	tests/test_gradient_stats.py tests/test_flow.py tests/test_watch.py tests/test_watch_stats.py tests/test_recorder.py tests/test_recorder_loss.py tests/test_recorder_ddp.py tests/test_diff.py tests/test_replay.py \
	tests/test_replay_hooks.py tests/test_engine_queue.py tests/test_engine_order_rule.py tests/test_exec_order.py \
	tests/test_hand_replay.py tests/test_steps.py tests/test_vjp.py tests/test_check_cli.py tests/test_deep_graphs.py \
	tests/test_compile_modules.py tests/test_compiled_region.py tests/test_ddp.py tests/test_fsdp.py tests/test_forward_origin.py \
	tests/test_format_options.py gradexport
TORCH_RANGE_PYTEST = GRADEXPORT_QUICK=1 $(1)/bin/python -m pytest -q -p no:cacheprovider -m "not browser" $(TORCH_RANGE_TESTS)

$(VENV)-oldest/.installed: $(PYTHON_STAMP) scripts/torch_venv.py
	$(PY) scripts/torch_venv.py $(VENV)-oldest oldest

$(VENV)-newest/.installed: $(PYTHON_STAMP) scripts/torch_venv.py requirements/torch-newest.txt
	$(PY) scripts/torch_venv.py $(VENV)-newest newest

torch-venvs: $(VENV)-oldest/.installed $(VENV)-newest/.installed

test-torch-oldest: $(VENV)-oldest/.installed
	$(call TORCH_RANGE_PYTEST,$(VENV)-oldest)

test-torch-newest: $(VENV)-newest/.installed
	$(call TORCH_RANGE_PYTEST,$(VENV)-newest)

# The sdist and the wheel, checked as the package index would (twine check --strict).
dist: setup
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

# Lint and type checks: ruff (rules in pyproject.toml) and its formatter, mypy on the package; for the viewer's JavaScript,
# ESLint (eslint.config.mjs), TypeScript's check of the JSDoc types (jsconfig.json) and its unit tests (tests/js).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	npm run --silent lint:js
	npm run --silent typecheck:js
	npm run --silent test:js

# For development: skips the tests marked slow (torch.compile, deep graphs, site builds) and browser,
# and draws a fifth of each property test's examples (tests/examples_budget.py).
test-quick: setup
	GRADEXPORT_QUICK=1 $(PY) -m pytest -m "not slow and not browser"

examples: setup
	$(PY) -m gradexport gradexport.examples.blog:multiply_then_sum --format dot,svg,mermaid,json --output out/multiply_then_sum
	$(PY) -m gradexport gradexport.examples.blog:unbind_then_add --format dot,svg,mermaid,json --output out/unbind_then_add

site: setup
	$(VENV)/bin/mkdocs build --strict

serve: setup
	$(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

bench: setup
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) $(VENV)-oldest $(VENV)-newest node_modules site out dist

# Rebuild the interactive viewer's script (gradexport/viewer/viewer.bundle.js, committed) from gradexport/viewer/src.
.PHONY: viewer
viewer: $(NODE_STAMP)
	npm run build-viewer
