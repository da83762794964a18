# The two commands of the README: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One torch thread per process: on 2-core machines two contended OpenMP threads were 3x slower.
export OMP_NUM_THREADS ?= 1

.PHONY: demo test install chromium clean standard-corpus

$(BIN)/dragonlab: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing dragonlab and its pinned dependencies into $(VENV) (log: $(VENV)/install.log)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,serve]' >$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps $$($(BIN)/python scripts/derive_envs.py --no-deps) >>$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	$(BIN)/python -c "import dragonlab, tvm, torch"
	# In a git checkout, strip notebook outputs on commit (.gitattributes names the filter).
	if git rev-parse --git-dir >/dev/null 2>&1; then $(BIN)/nbstripout --install; fi
	touch $@

install: $(BIN)/dragonlab

demo: install
	$(BIN)/dragonlab campaign --config campaigns/quick.toml   # the quick campaign: dragonlab demo --out runs/demo

# The browser test and kaleido's PNG export drive Debian's Chromium: installed when missing (as root).
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "no chromium and not root: the browser test will be skipped (install Debian's chromium)"

# Two processes, a test file (or a group of files, tests/conftest.py) each at a time, so that a
# file's module fixtures are built once; the expensive session fixtures are built once for both
# (dragonlab/testing/shared.py). Bytecode is cached even where the environment says not to
# (PYTHONDONTWRITEBYTECODE, as in some containers): the tests start many Python processes
# (command lines, notebook kernels, workers), and each would compile dragonlab again.
test: install chromium
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n 2 --dist loadfile

# The shipped corpus (data/cpu-standard-v1; docs/dataset.md): hours on 2 cores, resumable.
CORPUS := data/cpu-standard-v1
standard-corpus: install
	for i in 0 1 2 3; do \
		$(BIN)/dragonlab collect --suite standard --trials 32 --shard $$i/4 --out $(CORPUS) && \
		$(BIN)/dragonlab records seal $(CORPUS) --shard $$i/4 || exit 1; \
	done
	$(BIN)/dragonlab collect --suite standard --benchmark-search $(CORPUS)/benchmark.json --out $(CORPUS)
	# MetaSchedule never looks at a kernel's outputs: judge every ok record before it is data.
	$(BIN)/dragonlab records check $(CORPUS)
	$(BIN)/dragonlab records seal $(CORPUS)
	$(BIN)/dragonlab records card $(CORPUS)

clean:
	rm -rf runs .pytest_cache
