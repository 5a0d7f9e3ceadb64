from elmoc_allennlp.modules.fasttext_vectors import FastTextVectors
from elmoc_allennlp.modules.layer_norm_lstm import ElmocLstm
from elmoc_allennlp.modules.interlayer_norm_lstm import InterLayerNormLstm
from elmoc_allennlp.modules.lm_heads import (
    AdaptiveSoftmaxHead,
    ContinuousOutputHead,
    LanguageModelHead,
    SampledSoftmaxHead,
    SoftmaxHead,
)
from elmoc_allennlp.modules.token_embedders import ElmocTokenEmbedder, FastTextTokenEmbedder
from elmoc_allennlp.modules.elmoc import ElmocArchive, ElmocBiLm, ElmocElmo
from elmoc_allennlp.modules.elmoc_embedder import ElmocEmbedder
