# Two entry points (see README.md):
#   make demo  - set up .venv, then the PTB quickstart: fastText -> ELMo-C pretraining -> evaluation
#   make test  - set up .venv, then the test suite
# Both are idempotent: the venv is rebuilt only when the install files change.
#
# Variables:
#   PYTHON=python3.12          the interpreter for .venv (default: the first of python3.11,
#                              python3.12, python3.13, python3 that runs and is CPython 3.11-3.13)
#   TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
#                              where pip looks for torch (default: pip's configuration; from PyPI
#                              proper, Linux torch is the CUDA build, several GB)
#   ELMOC_TEST_THREADS=1       intra-op threads for the test suite (tests/conftest.py)
#   PYTEST_ARGS="-x -k lstm"   passed to pytest; DEMO_ARGS to scripts/quickstart.py

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
EXTRAS := test,quickstart

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

.PHONY: install demo test benchmark clean check-python

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

$(STAMP): setup.py requirements/constraints.txt tools/torchvision_placeholder/setup.py tools/torchvision_placeholder/torchvision_placeholder.py
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
	$(BIN)/python -m pytest tests $(PYTEST_ARGS)

benchmark: $(STAMP)
	$(BIN)/python benchmarks/output_layers.py

clean:
	rm -rf $(VENV) .pytest_cache
