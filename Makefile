# Two commands do all the set-up on a fresh machine: `make book` and `make test`.
# Both create .venv on first use and install the project (editable) with its pinned dependencies.
# pip byte-compiles every installed module on one core (40 of a fresh install's 93 s on a
# 2-core machine): it installs without (--no-compile) and compileall does it on every core (the
# install then takes 73 s). Like pip, it skips the few files this Python cannot compile (torch
# ships a Python 3.12-only test module), hence `|| true`. The .pyc files must be written here:
# an environment with PYTHONDONTWRITEBYTECODE=1 would otherwise compile torch in every process.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NBDIR := _build/nbval
# Every chapter (book/**/*.md), for `make notebooks`; hidden folders are pruned, so that JupyterLab's
# .ipynb_checkpoints copies are not chapters (tests/convert_chapters.py, which lint, normalize and
# nbval use, skips them the same way; tests/test_chapters.py checks both).
CHAPTERS := $(shell find book -name '.*' -prune -o -name '*.md' -print | sort)
# JupyterLab settings shipped with the environment: a double click opens a chapter's .md as a
# notebook (jupytext's "Jupytext Notebook" viewer) instead of as text, and JupyterLab does not
# ask to fetch news or check for updates (it runs offline). A user's own settings win.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d/attnlab-jupytext.json
LAB_HOST ?= 127.0.0.1
LAB_PORT ?= 8888
# e.g. make lab LAB_ARGS=--no-browser

# Experiments cache their results by configuration; a test run starts from an empty cache.
export ATTNLAB_CACHE := $(CURDIR)/_build/cache
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# The book's figure style for every matplotlib figure of every chapter (nbval, build, lab).
export MATPLOTLIBRC := $(CURDIR)/lib/attnlab/attnlab.mplstyle

.PHONY: book test install lint unit chapters nbval build browser pages notebooks lab clean bench pdf singlehtml normalize mutate

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e ".[book,test,lab]"
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib >/dev/null 2>&1 || true
	mkdir -p $(dir $(LAB_OVERRIDES))
	printf '%s\n' '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}, "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' > $(LAB_OVERRIDES)
	touch $@

install: $(STAMP)

# A fresh build every time, so that every chapter is read and executed again: the chapters are
# executed on every core ($BOOK_JOBS processes; _ext/parallel_execution.py) into an emptied cache.
BUILD := rm -rf _build/html _build/.doctrees _build/jupyter_execute _build/.jupyter_cache && $(BIN)/jupyter-book build . -W --keep-going

book: $(STAMP)
	$(BUILD)

# The chapters are executed twice (nbval, then the build), each on every core. The library tests
# then run beside the single page and the browser check (`pages`): these leave a core idle a
# quarter of their time (Sphinx writes the single page on one core; Chromium waits on pages),
# and the library tests fill it. --output-sync prints each one's output whole when it ends.
test: $(STAMP)
	rm -rf $(ATTNLAB_CACHE)
	$(MAKE) --no-print-directory lint nbval build
	$(MAKE) --no-print-directory -j2 --output-sync=recurse unit pages
	@echo "make test: all checks passed"

# The single page, then the browser check on both builds (one after the other, even under -j).
pages: $(STAMP)
	$(MAKE) --no-print-directory -j1 singlehtml browser

# ruff on the library and, through notebooks converted into a scratch folder, on the chapters' code
# at the width of the text column (76). `make normalize` formats the chapters' code cells.
LINTDIR := _build/lint
lint: $(STAMP)
	$(BIN)/ruff check lib tests benchmarks
	$(BIN)/ruff format --check lib tests benchmarks
	rm -rf $(LINTDIR)
	$(BIN)/python tests/convert_chapters.py $(LINTDIR) >/dev/null
	$(BIN)/ruff check --config "line-length = 76" $$(find $(LINTDIR) -name '*.ipynb' | sort)
	$(BIN)/python tests/normalize_chapters.py --check

# Two test processes side by side share the cores: each gets its share of BLAS and OpenMP threads
# (left to themselves, 2 processes x 2 threads on 2 cores ran the slowest tests 1.5 times slower).
SHARE := OMP_NUM_THREADS=$(shell n=$$(nproc); echo $$(( n > 2 ? n / 2 : 1 )))

# Library tests and the chapter-format checks (jupytext header, conversion), on both cores; the
# checks that drive Chromium are `browser`'s.
unit: $(STAMP)
	$(SHARE) $(BIN)/python -m pytest tests -n 2 --ignore=tests/test_browser.py --ignore=tests/test_lab.py -q

# Every chapter converted to .ipynb in a scratch folder, then executed cell by cell by nbval.
nbval: $(STAMP)
	rm -rf $(NBDIR)
	$(BIN)/python tests/convert_chapters.py $(NBDIR)
	cd $(NBDIR) && $(SHARE) $(abspath $(BIN))/python -m pytest --nbval-lax -n 2 -q -p no:cacheprovider \
		--rootdir=. -c /dev/null --dist loadfile .

# The book build executes every chapter again; -W turns any warning into a failure.
build: $(STAMP)
	$(BUILD)

# What a reader sees in Chromium: the built pages and both PDFs (tests/test_browser.py), and the
# chapters opened, run and saved in JupyterLab (tests/test_lab.py). Under `make test` they run
# beside the library tests, whose work fills the time they wait on the browser and the server.
browser: $(STAMP)
	$(BIN)/python -m pytest tests/test_browser.py tests/test_lab.py -q

# The whole book on one page (_build/singlehtml), written from the HTML build's environment in
# _build/.doctrees: no chapter is read or executed again (run `make book` first).
singlehtml: $(STAMP)
	test -f _build/.doctrees/environment.pickle || $(BUILD)
	rm -rf _build/singlehtml
	$(BIN)/jupyter-book build . -W --keep-going --builder singlehtml

# The book as two PDFs for the reading group, printed from the single page by Debian's Chromium
# (playwright), offline, with typeset math and the figures, a title page (version, date, commit),
# bookmarks and a table of contents with page numbers: _build/pdf/solvable-attention-participants.pdf
# without the solutions and "What happens" answers, _build/pdf/solvable-attention-leader.pdf with
# them at the end of each part. It fails on a table wider than the page or a page left almost blank.
pdf: singlehtml
	$(BIN)/python tests/print_pdf.py

# The paired notebook next to every chapter (git-ignored). The .md stays the source: --update
# takes the inputs from the .md and keeps the outputs and cell ids of an existing .ipynb.
# --use-source-timestamp gives the .ipynb its .md's time: Jupyter (jupytext) refuses to open a
# pair whose .ipynb is newer than its .md unless their texts agree, which the order and style of
# cell options (e.g. `caption: |`) in a hand-written .md prevent.
notebooks: $(STAMP)
	$(BIN)/jupytext --to ipynb --update --use-source-timestamp $(CHAPTERS)

# JupyterLab on 127.0.0.1; open a chapter's .md and run it (its kernel is this .venv's Python,
# where attnlab is installed). Saving writes the paired .ipynb as well (jupytext.toml).
lab: $(STAMP)
	JUPYTER_PREFER_ENV_PATH=1 $(BIN)/jupyter lab --ServerApp.ip=$(LAB_HOST) --ServerApp.port=$(LAB_PORT) --ServerApp.root_dir=$(CURDIR) \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# Benchmarks against baselines timed side by side in the same run (ratios); writes
# benchmarks/RESULTS.md and the README's table. BENCH_ARGS=--quick (seconds; writes _build/benchmarks/
# instead), --book (also executes every chapter, a few minutes more) or --build (also times
# `make book`'s cold execution of every chapter and `make test`).
bench: $(STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

# Plausible bugs (tests/mutations.toml) put one at a time into a scratch copy of the library under
# _build/mutate: each must make its module's tests fail (tests/mutate.py, 2 processes; not part of
# `make test`; `make bench` reports the last whole run's time from its record). MUTATE_ARGS=--suite
# also tries a survivor against the whole unit suite; MUTATE_ARGS="--only ID ..." runs some of them,
# MUTATE_ARGS=-j1 one at a time.
mutate: $(STAMP)
	$(BIN)/python tests/mutate.py $(MUTATE_ARGS)

# Every chapter rewritten once in the exact style jupytext writes (cell options folded into one
# line each), so that saving an unchanged chapter in JupyterLab leaves `git diff` empty.
normalize: $(STAMP)
	$(BIN)/python tests/normalize_chapters.py

clean:
	rm -rf _build
