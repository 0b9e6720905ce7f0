# mmext: `make demo` trains on the embedded demo data, `make test` runs the test suite,
# `make docs` builds the docs site into docs/en/_build/html (warnings are errors).
# Both install the stack into .venv/ first (once; again only when an install input changes).
VENV   ?= .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.install-stamp
DEMO   := data/demo/.stamp
DOCS_STAMP := $(VENV)/.docs-stamp
# Tests that train for minutes are marked `slow`; `make test-all` runs them too.
PYTEST_ARGS ?= -m "not slow"

.PHONY: install demo demo-data test test-all clean-demo docs

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

# The docs need Sphinx and myst-parser (requirements/docs.txt) beside the stack: autodoc imports
# mmext to read its docstrings. -W --keep-going: every broken docstring or link is listed, and fails.
$(DOCS_STAMP): requirements/docs.txt | $(STAMP)
	$(PYTHON) -m pip install --disable-pip-version-check -q -r requirements/docs.txt
	touch $@

docs: $(DOCS_STAMP)
	$(PYTHON) -m sphinx -W --keep-going -q -b html docs/en docs/en/_build/html
