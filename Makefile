# Two entry points that work on a fresh machine with Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench readme clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[torch,debug-server,llm,mcp,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/triage demo

# Lint and types first (seconds), then the suite. Bytecode as a wheel install would have
# it: the CLI starts in many tests and benchmarks, and environments with
# PYTHONDONTWRITEBYTECODE would otherwise recompile it every time.
test: lint
	$(BIN)/python -m compileall -q triage tools
	$(BIN)/python -m pytest -q --durations=15

lint: $(STAMP)
	$(BIN)/ruff check triage tools tests bench
	$(BIN)/ruff format --check triage tools tests bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m compileall -q triage tools
	-$(BIN)/python bench/hang_latency.py
	-$(BIN)/python bench/log_scan.py
	$(BIN)/python bench/eval_cases.py

# README's example output, from a real run of the demo (tests/test_readme_example.py checks it).
readme: $(STAMP)
	TRIAGE_UPDATE_README=1 $(BIN)/python -m pytest -q tests/test_readme_example.py

clean:
	rm -rf $(VENV) build dist
