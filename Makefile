# Two entry points (see README.md):
#   make demo  - set up .venv, then the PTB quickstart: fastText -> ELMo-C pretraining -> evaluation
#   make test  - set up .venv, then the test suite, in two pytest-xdist workers at one torch
#                thread each (PYTEST_WORKERS=N for another count, 0 or PYTEST_ARGS="-p no:xdist"
#                for one process)
#   make test-busy - the same suite while two busy loops keep both cores of a 2-core machine
#                busy (tools/busy.sh; BUSY_LOOPS=N for another count): what a shared CI machine
#                does to timing
#   make coverage - the suite under coverage.py: branch coverage of elmoc_allennlp/, by file
#   make mutation - mutmut 3 on the four modules of pyproject.toml's [tool.mutmut], then the score
# Both are idempotent: the venv is rebuilt only when the install files change.
#
# The published allennlp environment (CPython 3.8-3.10, torch 1.12; README "Install into your
# AllenNLP environment"), built as its users build it, in .venv-published:
#   make test-published        - allennlp 2.10.1 + this package with a plain `pip install`, the suite
#   make demo-published        - the same environment with the `quickstart` extra, then the quickstart
#   make check-wheel           - `python -m build`; the wheel installs, imports and loads through
#                                .allennlp_plugins in both environments
#   make check-cross-environment - an archive trained in each environment evaluates in the other
#
# Variables:
#   PYTHON=python3.12          the interpreter for .venv (default: the first of python3.11,
#                              python3.12, python3.13, python3 that runs and is CPython 3.11-3.13)
#   TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
#                              where pip looks for torch (default: pip's configuration; from PyPI
#                              proper, Linux torch is the CUDA build, several GB)
#   ELMOC_TEST_THREADS=1       intra-op threads for the test suite (tests/conftest.py; default 1
#                              in each pytest-xdist worker, PyTorch's default in one process)
#   PYTEST_WORKERS=2           pytest-xdist workers of the test targets (0: none, one process)
#   PYTEST_ARGS="-x -k lstm"   passed to pytest; DEMO_ARGS to scripts/quickstart.py
#   TESTS="tests/data tests/commands"  what pytest collects (default: tests, the whole suite)
#   PUBLISHED_PYTHON=python3.9 the interpreter for .venv-published (default: the first of python3.10,
#                              3.9, 3.8 that runs, on PATH or in pyenv's versions)

SUPPORTED_PYTHONS := python3.11 python3.12 python3.13 python3
SUPPORTED_VERSIONS := 3.11, 3.12 or 3.13
# Exits non-zero unless the interpreter is CPython 3.11-3.13.
IS_SUPPORTED := -c 'import platform, sys; sys.exit(not (platform.python_implementation() == "CPython" and (3, 11) <= sys.version_info[:2] <= (3, 13)))'
ifeq ($(origin PYTHON), undefined)
PYTHON := $(shell for candidate in $(SUPPORTED_PYTHONS); do \
	$$candidate $(IS_SUPPORTED) >/dev/null 2>&1 && { command -v $$candidate; break; }; done)
endif

# torch first and exactly: where pip has a local CPU build of this version (these machines), it
# takes it; a bare range would make pip pick the newest release, the CUDA build from PyPI.
TORCH_REQUIREMENT ?= torch==2.13.0
TORCH_PIP_ARGS ?=
EXTRAS := test,quickstart,lint

VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export NLTK_DATA := $(CURDIR)/$(VENV)/nltk_data
# allennlp checks for GPUs and spaCy at import; keep runs quiet and offline-safe.
export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1
ifdef ELMOC_TEST_THREADS
export ELMOC_TEST_THREADS
endif
PYTEST_ARGS ?=
TESTS ?= tests
# Two workers (a module's tests stay in one worker, so its module fixtures are built once); none
# when PYTEST_WORKERS is 0 or PYTEST_ARGS turns pytest-xdist off.
PYTEST_WORKERS ?= 2
XDIST_ARGS := $(if $(or $(filter 0,$(PYTEST_WORKERS)),$(findstring no:xdist,$(PYTEST_ARGS))),,-n $(PYTEST_WORKERS) --dist loadscope)
PYTEST := -m pytest $(XDIST_ARGS)

.PHONY: install demo test test-busy lint coverage mutation benchmark gpu-check clean check-python install-published test-published demo-published check-wheel check-cross-environment no-stale-build

install: $(STAMP)

check-python:
	@if [ -z "$(PYTHON)" ]; then \
		echo "No supported Python found: none of $(SUPPORTED_PYTHONS) runs as CPython $(SUPPORTED_VERSIONS)." >&2; \
		echo "Install one of those, or name it: make $(MAKECMDGOALS) PYTHON=/path/to/python3.12" >&2; \
		exit 1; \
	fi
	@if ! $(PYTHON) $(IS_SUPPORTED) >/dev/null 2>&1; then \
		echo "PYTHON=$(PYTHON) is not CPython $(SUPPORTED_VERSIONS) (it says: $$($(PYTHON) --version 2>&1 | head -n 1))." >&2; \
		exit 1; \
	fi
	@echo "Python: $(PYTHON) ($$($(PYTHON) --version 2>&1))"

$(STAMP): setup.py pyproject.toml requirements/constraints.txt tools/torchvision_placeholder/setup.py tools/torchvision_placeholder/torchvision_placeholder.py
	@$(MAKE) --no-print-directory check-python PYTHON="$(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(TORCH_PIP_ARGS) "$(TORCH_REQUIREMENT)"
	$(BIN)/pip install --quiet -c requirements/constraints.txt -e ".[$(EXTRAS)]"
	@# allennlp's own pins have no CPython 3.11+ wheels: install it without its dependencies.
	$(BIN)/pip install --quiet --no-deps allennlp==2.10.1 allennlp-models==2.10.1 ./tools/torchvision_placeholder
	@# an empty punkt folder silences nltk.download attempts made by allennlp_models.rc
	mkdir -p $(NLTK_DATA)/tokenizers/punkt
	$(BIN)/python -c "import allennlp.commands, allennlp_models.tagging, elmoc_allennlp; print('install OK')"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python scripts/quickstart.py $(DEMO_ARGS)

test: $(STAMP)
	$(BIN)/python $(PYTEST) $(TESTS) $(PYTEST_ARGS)

test-busy: $(STAMP)
	BUSY_PYTHON=$(BIN)/python tools/busy.sh $(BIN)/python $(PYTEST) $(TESTS) $(PYTEST_ARGS)

# Branch coverage of elmoc_allennlp/ by the suite's own processes (the processes tests start are not
# measured), per file and in total; the data in .coverage.
coverage: $(STAMP)
	$(BIN)/python $(PYTEST) --cov=elmoc_allennlp --cov-branch --cov-report=term $(TESTS) $(PYTEST_ARGS)

# Mutation score of the modules and focused tests of pyproject.toml's [tool.mutmut] (mutants/ holds
# the mutated copy and the results; `$(BIN)/mutmut browse` shows the survivors). Trained test
# fixtures are kept in $(MUTATION_CACHE) between the mutants' runs (tests/conftest.py).
# MUTANTS: the functions mutated, a fixed subset of the four modules (310 mutants; all of them,
# 1,882, take hours on 2 cores): the continuous loss whole, the recurrence's packing and step
# schedule, archive extraction's entry point, and the corpus shares' bounds, file list and locate.
# MUTANTS="elmoc_allennlp.*" mutates the four modules whole.
MUTATION_CACHE ?= $(CURDIR)/mutants/fixture-cache
MUTATION_WORKERS ?= 2
MUTANTS ?= 'elmoc_allennlp.modules.output_layers.continuous_output.*' \
	'elmoc_allennlp.modules.seq2seq_encoders.lstm_recurrence.x_pack_by_length__mutmut_*' \
	'elmoc_allennlp.modules.seq2seq_encoders.lstm_recurrence.x__steps__mutmut_*' \
	'elmoc_allennlp.common.archives.extraction.x_extract_archive__mutmut_*' \
	'elmoc_allennlp.data.dataset_readers.corpus_shares.x_share_bounds__mutmut_*' \
	'elmoc_allennlp.data.dataset_readers.corpus_shares.x_corpus_files__mutmut_*' \
	'elmoc_allennlp.data.dataset_readers.corpus_shares.x*CorpusShare*locate__mutmut_*'
mutation: $(STAMP)
	$(BIN)/pip install --quiet -c requirements/constraints.txt mutmut
	ELMOC_TEST_THREADS=1 OMP_NUM_THREADS=1 ELMOC_TEST_FIXTURE_CACHE=$(MUTATION_CACHE) \
		$(BIN)/mutmut run --max-children $(MUTATION_WORKERS) $(MUTANTS)
	$(BIN)/python tools/mutation_score.py $(MUTANTS)

# Formatting and lint, as configured in pyproject.toml: black at allennlp's 100 columns (checked,
# not applied: `$(BIN)/black $(LINT_PATHS)` applies it) and ruff (pyflakes, pycodestyle). Installs
# nothing: black and ruff are the `lint` extra of setup.py.
LINT_PATHS := elmoc_allennlp elmoc_allennlp_hardening.py tests tools benchmarks scripts examples setup.py
lint:
	@for tool in black ruff; do [ -x $(BIN)/$$tool ] || { \
		echo "$(BIN)/$$tool is missing: $(BIN)/pip install -c requirements/constraints.txt -e \".[lint]\"" >&2; \
		exit 1; }; done
	$(BIN)/black --check $(LINT_PATHS)
	$(BIN)/ruff check $(LINT_PATHS)

benchmark: $(STAMP)
	$(BIN)/python -m benchmarks.output_layers

# The GPU check (benchmarks/README.md, "The GPU check"): on a machine without CUDA, its dry run
# (tiny sizes, under a minute). Results: $(GPU_CHECK_OUT)/results.json and results.md.
GPU_CHECK_OUT ?= $(or $(OUT),/tmp/elmoc_gpu_check)
gpu-check: $(STAMP)
	$(BIN)/python -m benchmarks.gpu_check --out $(GPU_CHECK_OUT) \
		$$($(BIN)/python -c "import torch; print('' if torch.cuda.is_available() else '--dry-run')") $(GPU_CHECK_ARGS)

# --- The published environment ------------------------------------------------------------------
PUBLISHED_VENV := .venv-published
PUBLISHED_BIN := $(PUBLISHED_VENV)/bin
PUBLISHED_STAMP := $(PUBLISHED_VENV)/.installed
IS_PUBLISHED := -c 'import platform, sys; sys.exit(not (platform.python_implementation() == "CPython" and (3, 8) <= sys.version_info[:2] <= (3, 10)))'
# The first of these that runs as CPython 3.8-3.10, 3.10 first (pyenv's interpreters count even
# when they are not on PATH).
PYENV_VERSIONS := $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions
PUBLISHED_CANDIDATES := $(foreach v,3.10 3.9 3.8,python$(v) $(wildcard $(PYENV_VERSIONS)/$(v).*/bin/python$(v)))
ifeq ($(origin PUBLISHED_PYTHON), undefined)
PUBLISHED_PYTHON := $(shell for candidate in $(PUBLISHED_CANDIDATES); do \
	$$candidate $(IS_PUBLISHED) >/dev/null 2>&1 && { command -v $$candidate; break; }; done)
endif

# What a user has: allennlp's own install (pinned to one verified resolution for CI), then this
# package with a plain `pip install`, which must only add packages, never replace one.
$(PUBLISHED_STAMP): setup.py requirements/published-constraints.txt | no-stale-build
	@$(PUBLISHED_PYTHON) $(IS_PUBLISHED) >/dev/null 2>&1 || { echo "No CPython 3.8-3.10 for the published environment (PUBLISHED_PYTHON='$(PUBLISHED_PYTHON)'): install one, or name it: make install-published PUBLISHED_PYTHON=/path/to/python3.10" >&2; exit 1; }
	@echo "Published environment's Python: $(PUBLISHED_PYTHON) ($$($(PUBLISHED_PYTHON) --version 2>&1))"
	rm -rf $(PUBLISHED_VENV)
	$(PUBLISHED_PYTHON) -m venv $(PUBLISHED_VENV)
	$(PUBLISHED_BIN)/pip install --quiet -c requirements/published-constraints.txt allennlp==2.10.1 allennlp-models==2.10.1 "numpy<2"
	$(PUBLISHED_BIN)/pip freeze | sort > $(PUBLISHED_VENV)/allennlp-freeze.txt
	$(PUBLISHED_BIN)/pip install --quiet -c requirements/published-constraints.txt ".[test]"
	@replaced=$$($(PUBLISHED_BIN)/pip freeze | sort | comm -23 $(PUBLISHED_VENV)/allennlp-freeze.txt -); \
	if [ -n "$$replaced" ]; then echo "installing the plugin replaced: $$replaced" >&2; exit 1; fi
	mkdir -p $(PUBLISHED_VENV)/nltk_data/tokenizers/punkt
	touch $(PUBLISHED_STAMP)

install-published: $(PUBLISHED_STAMP)

# A plain `pip install .` builds in ./build and installs what it finds there, a module deleted since
# included: every non-editable install of this tree starts without it.
no-stale-build:
	rm -rf build

# The plugin is reinstalled (not editable, seconds) so that processes the tests start run this tree.
test-published: export NLTK_DATA := $(CURDIR)/$(PUBLISHED_VENV)/nltk_data
test-published: $(PUBLISHED_STAMP) no-stale-build
	$(PUBLISHED_BIN)/pip install --quiet --no-deps --force-reinstall .
	$(PUBLISHED_BIN)/python $(PYTEST) $(TESTS) $(PYTEST_ARGS)

# The quickstart in the published environment (README, "First run in the published environment"):
# the plugin with its `quickstart` extra, installed as a user would (`pip install ".[quickstart]"`).
demo-published: export NLTK_DATA := $(CURDIR)/$(PUBLISHED_VENV)/nltk_data
demo-published: $(PUBLISHED_STAMP) no-stale-build
	$(PUBLISHED_BIN)/pip install --quiet -c requirements/published-constraints.txt ".[quickstart]"
	$(PUBLISHED_BIN)/python scripts/quickstart.py $(DEMO_ARGS)

check-wheel: $(STAMP) $(PUBLISHED_STAMP)
	rm -rf dist
	$(BIN)/pip install --quiet -c requirements/constraints.txt build
	$(BIN)/python -m build --outdir dist .
	$(BIN)/pip install --quiet --no-deps --force-reinstall dist/elmoc_allennlp-*.whl
	$(BIN)/python tools/check_wheel.py
	NLTK_DATA=$(CURDIR)/$(PUBLISHED_VENV)/nltk_data $(PUBLISHED_BIN)/pip install --quiet --no-deps --force-reinstall dist/elmoc_allennlp-*.whl
	NLTK_DATA=$(CURDIR)/$(PUBLISHED_VENV)/nltk_data $(PUBLISHED_BIN)/python tools/check_wheel.py
	@# back to the editable install of this tree
	$(BIN)/pip install --quiet --no-deps -e .

CROSS := .cross-environment
check-cross-environment: $(STAMP) $(PUBLISHED_STAMP)
	rm -rf $(CROSS)
	$(BIN)/python -m scripts.cross_environment_check train $(CROSS)/modern-trained
	$(BIN)/python -m scripts.cross_environment_check evaluate $(CROSS)/modern-trained
	$(PUBLISHED_BIN)/python -m scripts.cross_environment_check evaluate $(CROSS)/modern-trained
	$(PUBLISHED_BIN)/python -m scripts.cross_environment_check train $(CROSS)/published-trained
	$(PUBLISHED_BIN)/python -m scripts.cross_environment_check evaluate $(CROSS)/published-trained
	$(BIN)/python -m scripts.cross_environment_check evaluate $(CROSS)/published-trained

clean:
	rm -rf $(VENV) $(PUBLISHED_VENV) $(CROSS) dist build .pytest_cache mutants .coverage
