# Everything installs from nothing into .venv; the stamp re-runs pip when pyproject changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DLSCHED := $(VENV)/bin/dlsched
STAMP := $(VENV)/.installed
CACHE ?= .cache/models
export TF_CPP_MIN_LOG_LEVEL := 3
export DLSCHED_CACHE := $(abspath $(CACHE))

.PHONY: venv demo test layers gate docs bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[test]'
	# The peer of tests/test_trace_hta.py; --no-deps: it declares jupyterlab, which its TraceAnalysis never imports.
	$(PY) -m pip install -q --no-compile --no-deps HolisticTraceAnalysis==0.5.0
	# Bytecode for everything installed, on every core at once: pip compiles one file after another, about 70 s
	# of the install on 2 cores against about 40 s so. Files of a newer Python (torch ships one) stay uncompiled,
	# as pip leaves them.
	$(PY) -m compileall -q -j 0 $(VENV)/lib > $(VENV)/compileall.log 2>&1 \
	  || echo "compileall: $$(grep -c 'Error compiling' $(VENV)/compileall.log) file(s) left uncompiled, as pip would"
	touch $(STAMP)

demo: $(STAMP)
	bash examples/demo.sh

# The layers contract, the regression gate on the example models and the docs build run first,
# so pytest's summary is the last line. Two pytest workers, each taking whole files (--dist loadfile, so a
# module's fixtures are built once): much of the suite waits on real processes, timeouts and networks.
test: $(STAMP) layers gate docs
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -n 2 --dist loadfile

# The import-linter contract in pyproject.toml: the layers only point down.
layers: $(STAMP)
	$(VENV)/bin/lint-imports

gate: $(STAMP)
	bash examples/ci/gate_examples.sh

# The chapters in docs/ (mkdocs.yml), into site/; --strict turns a broken link or a page left out of the nav into a failure.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .cache out build *.egg-info
