# The two commands of the quick start: `make run` and `make test`.
# Both create .venv if absent and install the project into it; the install is
# skipped when setup.cfg and pyproject.toml have not changed since the last one.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SPEC   ?= cli/examples/items.toml
LOGDIR ?= runs/items

.PHONY: run test test-full test-faults lint bench install compile clean

# cec's modules byte-compiled, as pip compiles a package it installs (the editable
# install does not): a process then loads them instead of compiling about 150 modules
# (0.3 s in the driver, the Python worker daemon and `cec export` each), also where
# PYTHONDONTWRITEBYTECODE is set. Only what changed is compiled again.
PACKAGES := cec cec_spark cli recovery storage_log
compile: $(STAMP)
	@$(BIN)/python -m compileall -q $(PACKAGES)

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cec needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# A fresh run each time: the previous run's logs under $(LOGDIR) are replaced.
run: $(STAMP) compile
	@sh scripts/check-java.sh
	rm -rf $(LOGDIR)
	$(BIN)/cec run pipeline $(SPEC) --log-dir $(LOGDIR)

test: $(STAMP) compile
	@sh scripts/check-java.sh
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

# Everything `make test` samples: the three parts of the long tests (tests/conftest.py
# PARTS; `make test` runs one part a day) and every crash-point cell (about 30 minutes).
test-full: $(STAMP) compile
	@sh scripts/check-java.sh
	$(BIN)/ruff check .
	$(BIN)/mypy
	CEC_TEST_FULL=1 CEC_FAULTS_FULL=1 $(BIN)/python -m pytest -q

# Every cell of the crash-point matrix (tests/faults: the real programs killed -9 at
# each point of storage_log/faults.py, recovered, compared with pandas; 4 to 10 minutes
# on 2 cores); `make test` runs a sample of it that changes with the date.
test-faults: $(STAMP) compile
	@sh scripts/check-java.sh
	CEC_FAULTS_FULL=1 $(BIN)/python -m pytest -q tests/faults tests/storage_log/test_faults.py

bench: $(STAMP) compile
	@sh scripts/check-java.sh
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) runs .mypy_cache .ruff_cache .pytest_cache
