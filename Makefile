VENV ?= .venv
PY := $(VENV)/bin/python
SCENARIO ?= scenarios/quickstart.yaml

.PHONY: setup run test test-unit bench clean doctor

setup:
	bash scripts/setup.sh

run:
	$(VENV)/bin/testbed run $(SCENARIO)

test:
	$(PY) -m pytest -q

test-unit:
	$(PY) -m pytest -q -m unit

bench:
	$(PY) -m bench

doctor:
	$(VENV)/bin/testbed doctor

clean:
	$(VENV)/bin/testbed clean
