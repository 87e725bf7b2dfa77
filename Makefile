# One command per task, shared by the README, CI and your own hands.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Local try-out defaults (never used in production: set your own in the environment).
export COUNTERSIGN_CONFIG ?= countersign.example.yml
export SALES_BOT_TOKEN ?= dev-sales-bot-token-change-me
export SALES_BOT_SIGNING ?= dev-sales-bot-signing-change-me

.PHONY: install install-e2e run demo test test-e2e test-lowest test-ts faults lint bench migrate \
	openapi screenshot docs clean

# both distributions of the checkout: the server (countersign-bot) and the agent-side client
# (countersign-client, clients/python), editable
CLIENT := clients/python
FRAMEWORKS := maf,ag-ui,langgraph,openai-agents,claude-code,mcp

$(STAMP): pyproject.toml $(CLIENT)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./$(CLIENT) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# the client's framework extras: the adapters' end-to-end tests run the real frameworks
E2E_STAMP := $(VENV)/.installed-e2e-stamp
$(E2E_STAMP): $(STAMP) pyproject.toml $(CLIENT)/pyproject.toml
	$(BIN)/python -m pip install --quiet -e './$(CLIENT)[$(FRAMEWORKS)]'
	touch $(E2E_STAMP)

install-e2e: $(E2E_STAMP)

# Serves on $$PORT (3000). Without SLACK_BOT_TOKEN it talks to a local Slack stand-in.
run: install
	$(if $(SLACK_BOT_TOKEN),,COUNTERSIGN_SLACK_STANDIN=1) $(BIN)/countersign run

migrate: install
	$(BIN)/countersign migrate

demo: install
	$(BIN)/python -m tests.demo

# unit + integration (real PostgreSQL, Slack stand-in): no agent framework needed. On
# TEST_WORKERS processes (pytest-xdist), each with its own embedded PostgreSQL and template
# database; a module whose module-scoped fixture is costly stays on one (xdist_group marks).
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --dist loadgroup
test: install
	$(BIN)/python -m pytest $(PARALLEL) tests --ignore=tests/e2e --ignore=tests/faults

# the fault suite: the bot as real processes under kill -9, a stopped PostgreSQL, Slack and the
# agent failing, three replicas, SIGTERM; prints the table docs/faults.md shows
faults: install
	$(BIN)/python -m pytest tests/faults -q -s -p no:randomly

# the agent frameworks themselves (scripted models, no LLM, loopback only)
test-e2e: install-e2e
	$(BIN)/python -m pytest tests/e2e

# the TypeScript client (clients/typescript, docs/typescript.md): npm ci from its lockfile, the
# generated types checked against docs/openapi.json, a strict build, node's test runner against
# the bot on loopback (tests/support/ts_bot.py: hence install)
TS_CLIENT := clients/typescript
test-ts: install
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund
	cd $(TS_CLIENT) && npm run check:types
	cd $(TS_CLIENT) && npm run build
	cd $(TS_CLIENT) && npm test

# the lower bounds, proved: a venv of its own at the lowest versions the bounds allow (uv's
# lowest-direct: each declared dependency at its lower bound, the rest at their newest), the
# test tools at their newest but never moving those. First the server with the bare client (the
# server's suite), then the framework extras on top (the adapters' end-to-end tests).
LOWEST     := .venv-lowest
LOWEST_UV  := VIRTUAL_ENV=$(LOWEST) $(LOWEST)/bin/uv pip
LOWEST_PIN := $(LOWEST)/lowest-constraints.txt
BOUNDED := slack-bolt|slack-sdk|aiohttp|pydantic|pydantic-settings|asyncpg|tenacity|pyyaml|pgserver
BOUNDED := $(BOUNDED)|prometheus-client|rfc8785|orjson|jsonschema|referencing|async-lru|webauthn|joserfc
BOUNDED := $(BOUNDED)|agent-framework-core|ag-ui-protocol|langgraph|langchain
BOUNDED := $(BOUNDED)|langgraph-checkpoint-sqlite|openai-agents|mcp
define lowest_tools
	$(LOWEST_UV) freeze --exclude-editable | grep -vE '^(pip|setuptools|wheel|uv)==' > $(LOWEST_PIN)
	$(LOWEST_UV) install --quiet -c $(LOWEST_PIN) -e '.[dev]'
	$(LOWEST_UV) freeze | grep -iE '^($(BOUNDED))=='
endef

test-lowest:
	rm -rf $(LOWEST)
	$(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install --quiet uv
	$(LOWEST_UV) install --quiet --resolution lowest-direct -e . -e ./$(CLIENT)
	$(lowest_tools)
	$(LOWEST)/bin/python -m pytest $(PARALLEL) tests --ignore=tests/e2e --ignore=tests/faults
	$(LOWEST_UV) install --quiet --resolution lowest-direct -e . -e './$(CLIENT)[$(FRAMEWORKS)]'
	$(lowest_tools)
	$(LOWEST)/bin/python -m pytest tests/e2e

# the adapters are type-checked against the real frameworks, hence the e2e extras
lint: install-e2e
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# the documentation site (mkdocs.yml, docs/) into site/, strictly: a broken link or anchor, or a
# page missing from the nav, fails. Offline: nothing is fetched at build time. The theme's notice
# about its own end of life (NO_MKDOCS_2_WARNING) is silenced; it is not about this build.
DOCS_STAMP := $(VENV)/.installed-docs-stamp
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# the wire contract as OpenAPI 3.1, generated from the models (a test fails when it drifts)
openapi: install
	$(BIN)/python -m bot.openapi > docs/openapi.json
	@echo "then regenerate the TypeScript client's types: cd $(TS_CLIENT) && npm run gen:types"

# docs/sandbox.png: the sandbox page with a settled and a pending card (needs Debian's chromium)
screenshot: install
	$(BIN)/python -m tests.browser.screenshot

# figures, never assertions: intake (1/32/128 clients) beside a bare aiohttp+asyncpg baseline,
# clicks (1 and 50 at once), timers behind due_at, growth (empty vs 100k settled + 10k pending),
# memory (after 100k submissions vs 1k), then each performance target beside its figure;
# about ten minutes. tests/bench/bench.py's docstring lists the phases and their flags. The MCP
# gateway's (an ungated call direct vs through it) needs the client's mcp extra: install-e2e.
bench: install-e2e
	$(BIN)/python -m tests.bench.bench
	$(BIN)/python -m tests.bench.governance
	$(BIN)/python -m tests.bench.grants
	$(BIN)/python -m tests.bench.mcp_gateway

# the bot's memory after 100 000 submissions vs after 1 000, in a process of its own, alone
.PHONY: bench-memory
bench-memory: install
	$(BIN)/python -m tests.bench.bench --phases memory

clean:
	rm -rf $(VENV) $(LOWEST) .countersign .pytest_cache .mypy_cache .ruff_cache \
		$(TS_CLIENT)/node_modules $(TS_CLIENT)/dist site
