from elmoc_allennlp.modules.seq2seq_encoders import LayerNormLstm
from elmoc_allennlp.modules.output_layers import (
    AdaptiveSoftmaxOutputLayer,
    ContinuousOutputLayer,
    LanguageModelOutputLayer,
    SampledSoftmaxOutputLayer,
    SoftmaxOutputLayer,
)
from elmoc_allennlp.modules.token_embedders import FastTextTokenEmbedder
