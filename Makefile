# Quick start: `make demo` (a notebook session on the offline model) and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.ocw-installed
HEADLESS ?=
PORT   ?= 8888

.PHONY: demo test test-js test-py install bench clean mutation mutation-core mutation-sample litellm quality test-under-load

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml hatch_build.py $(wildcard widgets/labextension/*/package.json widgets/labextension/*/static/*.js)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The real servers' folder (tests/realservers.py looks in the same places, in this order).
REALSERVER := $(firstword $(OCW_REALSERVER_DIR) $(wildcard ../shared/realserver) $(wildcard /work/shared/realserver))
RS_WHEEL   := $(firstword $(wildcard $(REALSERVER)/llama_cpp_python-*.whl))
RS_STAMP   := $(VENV)/.ocw-realserver

# llama-cpp-python's server for the real-server tests: the prebuilt wheel from the
# shared folder, its pure-Python dependencies from PyPI (seconds). No folder: nothing.
$(RS_STAMP): $(STAMP) $(RS_WHEEL)
	$(PY) -m pip install -q '$(RS_WHEEL)[server]'
	touch $(RS_STAMP)

install: $(STAMP) $(if $(RS_WHEEL),$(RS_STAMP))

# LiteLLM's proxy for the gateway tests, in a venv of its own (it pins many packages).
# tests/litellm_proxy.py installs the same version on demand; this does it ahead of time.
LITELLM_VENV ?= .venv-litellm
litellm:
	test -x $(LITELLM_VENV)/bin/python || $(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install -q 'litellm[proxy]==1.108.7'

js/node_modules/.package-lock.json: js/package.json js/package-lock.json
	cd js && npm ci --no-audit --no-fund --loglevel=error

test-js: js/node_modules/.package-lock.json
	cd js && npm test

test-py: install
	$(PY) -m pytest $(PYTEST_ARGS)

# JS first, pytest last: the CI log reader reads pytest's closing line.
test: install test-js
	$(PY) -m pytest $(PYTEST_ARGS)

demo: install
ifeq ($(HEADLESS),1)
	$(PY) -m ocw.notebook.demo --headless
else
	$(PY) -m ocw.notebook.demo --port $(PORT)
endif

# `make bench`: issue 14's figures at 10k / 100k / 1M messages (~10 min on 2 cores), then
# %compact against read+tokenize (ocw.bench.compact_cost), the chat widget's comm bytes per turn
# (ocw.bench.comm), many writers on DuckDB and PostgreSQL (ocw.bench.pg); `make bench QUICK=1`: tiny sizes.
comma := ,
bench: install
	$(PY) -m ocw.bench all $(if $(QUICK),--quick)
	$(PY) -m ocw.bench.first $(if $(QUICK),--quick)
	$(PY) -m ocw.bench.cell $(if $(QUICK),--quick)
	$(PY) -m ocw.bench.compact_cost $(if $(QUICK),--quick)
	$(PY) -m ocw.bench.comm $(if $(QUICK),--quick)
	$(PY) -m ocw.bench.pg $(if $(QUICK),--turns 20 --writers 1$(comma)2)

# `make quality`: issue 22's quality benchmark (what the model still knows after many
# compactions; ~10 min on 2 cores); `make quality QUICK=1`: three short sessions.
quality: install
	$(PY) -m ocw.bench.quality $(if $(QUICK),--quick)

# Mutation testing (slow, so not part of `make test`), two tiers; `make mutation` runs both.
# Tier 1, `make mutation-core`: mutmut plants every small bug it can in the pure core and
# reports the ones the unit tests miss. Narrow it with MUTATE=ocw/context/facts.py
# (modules or folders of [tool.mutmut] only_mutate).
# Tier 2, `make mutation-sample`: a seeded, stratified sample of realistic one-line bugs
# (SAMPLE per module, default 15; SEED, default 26) in every other module of ocw/ and in
# widgets/*.js, each run against its module's own tests only (tools/mutation-mirrors.toml).
# Narrow it with SAMPLE_PATHS=ocw/store/transfer.py; BENCH=1 adds ocw/bench/ (minutes per run).
MUTATE ?=
MUTATION_JOBS ?= 1
MUTMUT_VERSION := 3.8.1
SAMPLE ?= 15
SEED ?= 26
SAMPLE_PATHS ?=

mutation-core: install
	@$(PY) -c "import importlib.metadata as m, sys; sys.exit(m.version('mutmut') != '$(MUTMUT_VERSION)')" 2>/dev/null \
		|| $(PY) -m pip install -q 'mutmut==$(MUTMUT_VERSION)'
	nice -n 10 $(PY) tools/mutation.py --jobs $(MUTATION_JOBS) $(MUTATE)

mutation-sample: install js/node_modules/.package-lock.json
	nice -n 10 $(PY) tools/mutation_sample.py --per-module $(SAMPLE) --seed $(SEED) $(if $(BENCH),--bench) $(SAMPLE_PATHS)

mutation: mutation-core mutation-sample

# `make test-under-load`: `make test` (PYTEST_ARGS passed on) while two CPU-bound processes
# run beside it, stopped afterwards: a test that assumes timing fails here. CI runs this.
test-under-load: install js/node_modules/.package-lock.json
	$(PY) tools/under_load.py --burners 2 $(MAKE) --no-print-directory test

clean:
	rm -rf $(VENV) js/node_modules dist build test-artifacts ocw/static mutants
