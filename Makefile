# Everything installs from nothing into .venv; the stamp re-runs pip when pyproject changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DLSCHED := $(VENV)/bin/dlsched
STAMP := $(VENV)/.installed
CACHE ?= .cache/models
export TF_CPP_MIN_LOG_LEVEL := 3
export DLSCHED_CACHE := $(abspath $(CACHE))

.PHONY: venv demo test layers gate bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	bash examples/demo.sh

# The layers contract and the regression gate on the example models run first, so pytest's summary is the last line.
test: $(STAMP) layers gate
	$(PY) -m pytest -q -p no:cacheprovider

# The import-linter contract in pyproject.toml: the layers only point down.
layers: $(STAMP)
	$(VENV)/bin/lint-imports

gate: $(STAMP)
	bash examples/ci/gate_examples.sh

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .cache out build *.egg-info
