# The two commands of the README:
#   make run   - the main job on the embedded defaults
#   make test  - ruff, mypy and the whole test suite
# Both set up .venv on first use (torch 2.13.0 CPU first, then the package with its extras).

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stratamem-installed

.PHONY: run test setup clean

run: $(STAMP)
	./scripts/run-demo.sh

test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(PY) -m pytest -q $(PYTEST_ARGS)

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/bootstrap.sh
	./scripts/bootstrap.sh $(VENV)
	touch $(STAMP)

clean:
	rm -rf $(VENV) stratamem-data
