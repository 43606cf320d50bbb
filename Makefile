# Two commands for a newcomer: `make demo` and `make test`. Both set up what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test test-main test-coopmat lint bench clean

setup:
	@bash ci/setup.sh

demo: setup
	$(VENV)/bin/vkumd info
	$(PY) -m vkumd.demo

lint: setup
	$(VENV)/bin/ruff check .

# The main lane: the system lavapipe, validation layers on, every test (coopmat ones skip
# there with the reason). Then the cooperative-matrix lane: Mesa 26's lavapipe, only the
# tests marked coopmat, and a missing capability fails instead of skipping.
test: lint test-main test-coopmat

test-main: setup
	VKUMD_VALIDATION=1 $(PY) -m pytest -q $(PYTEST_ARGS)

test-coopmat: setup
	VKUMD_VALIDATION=1 VKUMD_REQUIRE_COOPMAT=1 bash ci/coopmat-lane.sh run $(PY) -m pytest -q -m coopmat $(PYTEST_ARGS)

bench: setup
	$(PY) bench/transfer.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
