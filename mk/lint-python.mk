# Python lint: ruff (pinned in e2e/requirements.txt, installed by `make deps`; rules in ruff.toml)
# over the harness and tests (e2e/) and the simulator's scripts (sim/*.py).
.PHONY: lint-python

lint-python: deps
	$(VENV)/bin/ruff check .
