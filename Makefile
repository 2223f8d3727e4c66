# Two commands do all the set-up on a fresh machine:
#   make run    install into .venv and run the default scenario (report in reports/)
#   make test   install into .venv (test extras, chromium and tmux for the browser and terminal tests), check the
#               code (make lint), build the docs site (make docs) and run the tests (make test-unit: the unit
#               tests alone)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# CPU torch here; set TORCH_CONSTRAINT= (empty) to let pip choose torch as usual.
TORCH_CONSTRAINT ?= constraints/cpu.txt
CONSTRAINT_FLAG := $(if $(TORCH_CONSTRAINT),-c $(TORCH_CONSTRAINT),)
SCENARIO ?= scenarios/lists_vs_arrays.yaml
PYTEST_ARGS ?=
# make test runs the suite on this many pytest-xdist workers (0: in one process). Three on
# 2 cores: much of the suite waits (timeouts, sleeps, subprocess start-up), and a third worker
# fills those waits (measured: pytest 348 s at -n 3 against 396 s at -n 2, 669 tests).
TEST_WORKERS ?= 3

.PHONY: install install-test browser terminal run quick lint check-code docs check-docs test check-tests test-python test-unit clean

# The virtual environment itself, with a current pip.
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	@# A venv made before the rename holds memprobe under its old distribution name.
	$(PIP) uninstall --quiet --yes memprobe >/dev/null 2>&1 || true

# memprobe's own modules compiled once here: pip compiles what it installs, not an editable
# project, and where PYTHONDONTWRITEBYTECODE is set (as on the build VM) every process that
# imports memprobe (each `memprobe record`, each scenario child, each test's subprocess) would
# compile its ~90 modules again (~0.1 CPU-s each time, measured on `import memprobe.record.command`).
# A .pyc older than its source is ignored: an edit after the install costs that compile again.
COMPILE := $(PY) -m compileall -q -j 0 memprobe scenarios tests
# pip installs with --no-compile, and what is compiled is what memprobe and the tests import:
# tools/warm_bytecode.py imports it once with bytecode writing on (~1,700 modules, most of them
# torch's). Compiling the whole environment (compileall over its ~11,500 modules) took ~20 s of
# wall time on the build VM's 2 cores for ten times what is ever imported; this takes ~7 s on one.
WARM := PYTHONDONTWRITEBYTECODE= $(PY) tools/warm_bytecode.py

$(VENV)/.installed: pyproject.toml $(TORCH_CONSTRAINT) | $(PY)
	$(PIP) install --quiet --no-compile $(CONSTRAINT_FLAG) -e .
	$(WARM)
	$(COMPILE)
	touch $@

# One pip call for memprobe and its test extras (one resolve; the plain install is part of it).
$(VENV)/.installed-test: pyproject.toml $(TORCH_CONSTRAINT) | $(PY)
	$(PIP) install --quiet --no-compile $(CONSTRAINT_FLAG) -e '.[test,images,nvimgcodec,trainers]'
	$(WARM) --test
	$(COMPILE)
	touch $(VENV)/.installed $@

install: $(VENV)/.installed

# The Python packages and chromium install side by side (apt's download and pip's unpacking
# overlap: a fresh clone's set-up is that much shorter).
install-test:
	@$(MAKE) --no-print-directory -j2 $(VENV)/.installed-test browser
	@$(MAKE) --no-print-directory terminal

# Debian's chromium for the report's browser test. Where apt-get can install it (root on
# Debian, as in CI) a failed install fails `make test`: a green run must include the browser
# test. Elsewhere the test is skipped, with a note.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || { echo "error: could not install chromium for the browser test" >&2; exit 1; }; \
	  else echo "note: chromium not found and apt-get not usable here; the browser test will be skipped"; fi; }

# Debian's tmux for `memprobe top`'s terminal tests (tests/integration/test_top.py: a pane, keys
# sent, the screen read), the same way: installed where apt-get can, else those tests are skipped.
terminal:
	@command -v tmux >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null) \
	      || { echo "error: could not install tmux for the terminal tests" >&2; exit 1; }; \
	  else echo "note: tmux not found and apt-get not usable here; the terminal tests will be skipped"; fi; }

run: install
	$(VENV)/bin/memprobe run $(SCENARIO)

quick: install
	$(VENV)/bin/memprobe run scenarios/quick.yaml

# Formatting, lint, types, that every test the documentation names exists, and that the modules
# and docs/architecture.md agree (tools/check_architecture.py); all five run, and any finding fails
# the target.
lint: install-test
	@$(MAKE) --no-print-directory check-code

check-code:
	@fail=0; \
	$(VENV)/bin/ruff format --check . || fail=1; \
	$(VENV)/bin/ruff check . || fail=1; \
	$(VENV)/bin/mypy memprobe || fail=1; \
	$(PY) tools/check_doc_tests.py || fail=1; \
	$(PY) tools/check_architecture.py || fail=1; \
	exit $$fail

# The documentation as a site (mkdocs.yml; mkdocs and its Material theme come with the test extra) in
# site/, open site/index.html. --strict: a warning (a link to a page or an anchor that does not exist,
# a page left out of the nav) fails it. The screenshots in docs/img are made by tools/screenshots.py,
# by hand: it runs real jobs, too slow for every build.
docs: install-test
	@$(MAKE) --no-print-directory check-docs

# Not --quiet: with it mkdocs 1.6 counts no warning, and --strict passes a broken link (tried).
check-docs:
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The code checks and the docs site build run beside pytest (mypy's ~15 s of one core overlap the suite's start-up); any
# one failing fails the target. The 25 slowest tests are listed: where the suite's time goes. pytest exits 5 when it collected no test: a failure here, not a pass.
test: install-test
	@$(MAKE) --no-print-directory -j2 check-code check-docs check-tests

check-tests:
	@$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS); code=$$?; \
	if [ $$code -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$code

# The suite on another interpreter: PYTHON is the python of a venv holding torch, as
# tools/build_python.sh makes them (`bash tools/build_python.sh 3.13`, then
# `make test-python PYTHON=/work/pythons/3.13/venv/bin/python`). memprobe (editable, from this
# checkout: the venv may point at another one) and the extras make install-test installs go into it
# first (tools/suite_packages.py: torch kept at the venv's version; on a free-threaded
# interpreter, the packages with no wheel for it left out, each named with why), then the suite
# runs as in make test, on PYTHON_TEST_WORKERS workers (2: the interpreters built here are run on
# a shared 2-core machine). The code checks are not run: they belong to the machine's own Python.
PYTHON_TEST_WORKERS ?= 2
test-python: browser terminal
	@$(PYTHON) -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null || { \
	  echo "error: PYTHON=$(PYTHON) is not the python of a virtualenv (make one: bash tools/build_python.sh 3.13)" >&2; exit 2; }
	$(PYTHON) tools/suite_packages.py
	@$(PYTHON) -c 'import sys; print("suite on", sys.executable, sys.version.replace(chr(10), " "))'
	@$(MAKE) --no-print-directory check-tests PY=$(PYTHON) TEST_WORKERS=$(PYTHON_TEST_WORKERS)

# The unit tests alone (no real run; about a minute): the quick loop while editing.
test-unit: install-test
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-artifacts site
