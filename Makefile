# mmext: `make demo` trains on the embedded demo data, `make test` runs the test suite.
# Both install the stack into .venv/ first (once; again only when an install input changes).
VENV   ?= .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.install-stamp
DEMO   := data/demo/.stamp
# Tests that train for minutes are marked `slow`; `make test-all` runs them too.
PYTEST_ARGS ?= -m "not slow"

.PHONY: install demo demo-data test test-all clean-demo

install: $(STAMP)

$(STAMP): tools/setup_env.sh tools/install_stubs.sh $(shell find tools/stubs -type f) setup.py requirements/stack.txt requirements/runtime.txt requirements/tests.txt
	bash tools/setup_env.sh $(VENV)
	touch $@

demo-data: $(DEMO)

$(DEMO): tools/make_demo_data.py | $(STAMP)
	$(PYTHON) tools/make_demo_data.py --out data/demo
	touch $@

demo: $(STAMP) $(DEMO)
	bash tools/run_demo.sh

test: $(STAMP)
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PYTHON) -m pytest

clean-demo:
	rm -rf data/demo work_dirs/demo
