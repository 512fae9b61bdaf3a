# Two entry points: `make run` (main job on the built-in default) and `make test` (everything CI runs).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint typecheck pytest clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev,plot,ray]'
	touch $@

run: $(BIN)/.installed
	$(BIN)/gangsched

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(BIN)/.installed
	$(BIN)/mypy src

pytest: $(BIN)/.installed
	$(BIN)/pytest; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

test: lint typecheck pytest

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache
