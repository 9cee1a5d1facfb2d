# Two commands do all the set-up on a fresh machine: `make book` and `make test`.
# Both create .venv on first use and install the project (editable) with its pinned dependencies.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NBDIR := _build/nbval

# Experiments cache their results by configuration; a test run starts from an empty cache.
export ATTNLAB_CACHE := $(CURDIR)/_build/cache
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: book test install lint unit chapters nbval build browser clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[book,test]"
	touch $@

install: $(STAMP)

# A fresh build every time, so that every chapter is read and executed again.
BUILD := rm -rf _build/html _build/.doctrees _build/jupyter_execute && $(BIN)/jupyter-book build . -W --keep-going

book: $(STAMP)
	$(BUILD)

test: $(STAMP)
	rm -rf $(ATTNLAB_CACHE)
	$(MAKE) --no-print-directory lint unit nbval build browser
	@echo "make test: all checks passed"

lint: $(STAMP)
	$(BIN)/ruff check lib tests
	$(BIN)/ruff format --check lib tests

# Library tests and the chapter-format checks (jupytext header, conversion), on both cores.
unit: $(STAMP)
	$(BIN)/python -m pytest tests -n 2 --ignore=tests/test_browser.py -q

# Every chapter converted to .ipynb in a scratch folder, then executed cell by cell by nbval.
nbval: $(STAMP)
	rm -rf $(NBDIR)
	$(BIN)/python tests/convert_chapters.py $(NBDIR)
	cd $(NBDIR) && $(abspath $(BIN))/python -m pytest --nbval-lax -n 2 -q -p no:cacheprovider \
		--rootdir=. -c /dev/null --dist loadfile .

# The book build executes every chapter again; -W turns any warning into a failure.
build: $(STAMP)
	$(BUILD)

browser: $(STAMP)
	$(BIN)/python -m pytest tests/test_browser.py -q

clean:
	rm -rf _build
