# Two entry points: `make run` (main job on the built-in default) and `make test` (everything CI runs).
# `make run` installs only what the demo needs (the package and its [plot] extra); `make test`
# installs the test and development extras as well. `make test-minimum` and `make dist` are the
# extra checks described in docs/install.md.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MIN_VENV := .venv-min
OUT ?=
DIST := dist

.PHONY: run test lint typecheck pytest docs dist smoke test-minimum clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(BIN)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[plot]'
	touch $@

$(BIN)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,dev,plot,ray]'
	touch $@ $(BIN)/.installed-run

run: $(BIN)/.installed-run
	$(BIN)/gangsched$(if $(OUT), --out $(OUT))

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools

typecheck: $(BIN)/.installed
	$(BIN)/mypy src tests benchmarks tools

pytest: $(BIN)/.installed
	$(BIN)/pytest; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

test: lint typecheck pytest

# The documentation site (mkdocs.yml) into site/, strictly: a broken link or anchor fails. The
# API reference is rendered from the docstrings (mkdocstrings); then every public name must have
# an entry in it.
$(BIN)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[docs]'
	touch $@

docs: $(BIN)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python tools/api_docs.py site

# Build the sdist and the wheel, then check their metadata as PyPI would.
dist: $(BIN)/.installed
	rm -rf $(DIST)
	$(BIN)/python -m build --outdir $(DIST) .
	$(BIN)/twine check --strict $(DIST)/*

# The built wheel with no extras, in a venv of its own: the version, the help, one cycle on
# the example snapshot, a short FGD demo and a short run of the main job (no plot without
# matplotlib).
SMOKE_VENV := .venv-smoke
smoke: dist
	rm -rf $(SMOKE_VENV)
	$(PYTHON) -m venv $(SMOKE_VENV)
	$(SMOKE_VENV)/bin/pip install --quiet $(DIST)/*.whl
	$(SMOKE_VENV)/bin/gangsched --version
	$(SMOKE_VENV)/bin/python -m gangsched --help > /dev/null
	$(SMOKE_VENV)/bin/gangsched schedule -f examples/snapshot.yaml > /dev/null
	$(SMOKE_VENV)/bin/gangsched fgd demo --seeds 42 --limit 300 --workers 1 --out $(SMOKE_VENV)/demo > /dev/null
	$(SMOKE_VENV)/bin/gangsched --jobs 100 --cluster 4x8 --workers 1 --out $(SMOKE_VENV)/story > /dev/null
	test -s $(SMOKE_VENV)/story/story.json
	test -s $(SMOKE_VENV)/demo/analysis_allo_discrete.csv

# The oldest supported versions (ci/minimum.txt) in a venv of their own, then the test suite.
test-minimum:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/pip install --quiet -c ci/minimum.txt -e '.[test,plot]'
	$(MIN_VENV)/bin/python tools/check_minimum.py ci/minimum.txt
	# The testing page pins the counterexample hypothesis shrinks to, which depends on its
	# version; every other test runs.
	$(MIN_VENV)/bin/pytest -p no:cacheprovider --deselect \
	    tests/project/test_docs_testing_example.py::test_the_property_test_finds_the_toy_schedulers_partial_gang

clean:
	rm -rf $(VENV) $(MIN_VENV) $(SMOKE_VENV) $(DIST) site build .mypy_cache .pytest_cache .ruff_cache
