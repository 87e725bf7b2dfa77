# One command per task, shared by the README, CI and your own hands.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Local try-out defaults (never used in production: set your own in the environment).
export COUNTERSIGN_CONFIG ?= countersign.example.yml
export SALES_BOT_TOKEN ?= dev-sales-bot-token-change-me
export SALES_BOT_SIGNING ?= dev-sales-bot-signing-change-me

.PHONY: install run demo test lint bench migrate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Serves on $$PORT (3000). Without SLACK_BOT_TOKEN it talks to a local Slack stand-in.
run: install
	$(if $(SLACK_BOT_TOKEN),,COUNTERSIGN_SLACK_STANDIN=1) $(BIN)/countersign run

migrate: install
	$(BIN)/countersign migrate

demo: install
	$(BIN)/python -m tests.demo

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: install
	$(BIN)/python -m tests.bench.bench

clean:
	rm -rf $(VENV) .countersign .pytest_cache .mypy_cache .ruff_cache
