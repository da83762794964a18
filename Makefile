# The two commands of the README: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One torch thread per process: on 2-core machines two contended OpenMP threads were 3x slower.
export OMP_NUM_THREADS ?= 1

.PHONY: demo test install clean

$(BIN)/dragonlab: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing dragonlab and its pinned dependencies into $(VENV) (log: $(VENV)/install.log)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]' >$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps $$($(BIN)/python scripts/derive_envs.py --no-deps) >>$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	$(BIN)/python -c "import dragonlab, tvm, torch"
	touch $@

install: $(BIN)/dragonlab

demo: install
	$(BIN)/dragonlab demo --out runs/demo

test: install
	$(BIN)/python -m pytest -q

clean:
	rm -rf runs .pytest_cache
