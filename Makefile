# Two entry points (see README.md):
#   make demo  - set up .venv, then the PTB quickstart: fastText -> ELMo-C pretraining -> evaluation
#   make test  - set up .venv, then the test suite
# Both are idempotent: the venv is rebuilt only when the install files change.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export NLTK_DATA := $(CURDIR)/$(VENV)/nltk_data
# allennlp checks for GPUs and spaCy at import; keep runs quiet and offline-safe.
export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1
PYTEST_ARGS ?=

.PHONY: install demo test benchmark clean

install: $(STAMP)

$(STAMP): setup.py requirements/constraints.txt tools/torchvision_placeholder/setup.py tools/torchvision_placeholder/torchvision_placeholder.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c requirements/constraints.txt -e ".[test]"
	@# allennlp's own pins have no CPython 3.11 wheels: install it without its dependencies.
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
