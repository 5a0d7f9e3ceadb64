"""
A trained biLM in downstream models: its archive, indexers, `Elmo`-like module, token embedder and
Python API.
"""

from elmoc_allennlp.downstream.archive import BilmArchive
from elmoc_allennlp.downstream.indexers import BilmArchiveIndexer
from elmoc_allennlp.downstream.elmoc import ElmocBiLm, ElmocElmo
from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder
from elmoc_allennlp.downstream.embedder import ElmocEmbedder
