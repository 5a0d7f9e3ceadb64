"""
ELMo-C for AllenNLP. Importing the package registers all of its components and installs the
allennlp compatibility shims of `elmoc_allennlp.compat` (logged in one line). The classes a
script uses are importable from here: `from elmoc_allennlp import ElmocEmbedder`.
"""

from elmoc_allennlp.compat import install_shims

install_shims()

from elmoc_allennlp import (
    data,
    modules,
    downstream,
    models,
    predictors,
    training,
    finetune,
    commands,
)  # noqa: E402,F401

# What a user's script imports, at short paths as allennlp's (`from allennlp.modules.elmo import Elmo`).
from elmoc_allennlp.fasttext.vectors import FastTextVectors  # noqa: E402
from elmoc_allennlp.downstream import (
    BilmArchive,
    ElmocBiLm,
    ElmocElmo,
    ElmocEmbedder,
    ElmocTokenEmbedder,
)  # noqa: E402
from elmoc_allennlp.models import BidirectionalLanguageModel  # noqa: E402

__all__ = [
    "BidirectionalLanguageModel",
    "BilmArchive",
    "ElmocBiLm",
    "ElmocElmo",
    "ElmocEmbedder",
    "ElmocTokenEmbedder",
    "FastTextVectors",
]
