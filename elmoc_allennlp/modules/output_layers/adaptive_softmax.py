from typing import List

import torch

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmoc_allennlp.common.precision import at_least_float32
from elmoc_allennlp.modules.output_layers.output_layer import (
    ClosedVocabularyOutputLayer,
    LanguageModelOutputLayer,
)


@LanguageModelOutputLayer.register("elmoc_adaptive_softmax")
class AdaptiveSoftmaxOutputLayer(ClosedVocabularyOutputLayer):
    """
    The adaptive softmax of Grave et al. (2017), `torch.nn.AdaptiveLogSoftmaxWithLoss`: the output
    layer of ELMo-A (Li et al., 2019); the loss is the exact negative log-likelihood.

    Registered as a `LanguageModelOutputLayer` with name "elmoc_adaptive_softmax".

    # Parameters

    vocab : `Vocabulary`
        The model's vocabulary; `vocab_namespace` in it gives the closed set of words scored.
    input_dim : `int`
        Dimension of the hidden states scored (the contextualizer's `projection_dim`).
    cutoffs : `List[int]`
        Increasing ids below the vocabulary size where the head and each tail cluster end
        (`training_configs/pretrain/baselines.libsonnet` gives the paper's).
    vocab_namespace : `str`, optional (default = `"targets"`)
        The namespace of the target ids: that of the model's `target_indexer` (`"targets"` in the
        pretraining configs). It must be sorted by decreasing frequency, as allennlp's
        `from_instances` vocabulary is.
    div_value : `float`, optional (default = `4.0`)
        The projection of tail cluster `i` has dimension `input_dim // div_value^(i + 1)`; at least
        `1`, and small enough that the last cluster keeps a projection. `4.0` is torch's default.
    head_bias : `bool`, optional (default = `False`)
        Whether the head softmax has a bias (torch's default: it has none).
    """

    def __init__(
        self,
        vocab: Vocabulary,
        input_dim: int,
        cutoffs: List[int],
        vocab_namespace: str = "targets",
        div_value: float = 4.0,
        head_bias: bool = False,
    ) -> None:
        super().__init__(vocab, input_dim, vocab_namespace)
        cutoffs = list(cutoffs)
        if (
            not cutoffs
            or cutoffs != sorted(set(cutoffs))
            or cutoffs[0] <= 0
            or cutoffs[-1] >= self.num_words
        ):
            raise ConfigurationError(
                f"output_layer.cutoffs must be distinct increasing ids in [1, {self.num_words - 1}], got {cutoffs}"
            )
        if div_value < 1.0 or input_dim // div_value ** len(cutoffs) < 1:
            raise ConfigurationError(
                f"output_layer.div_value must be >= 1 and leave the last tail cluster of input_dim "
                f"{input_dim} a projection, got {div_value}"
            )
        self.adaptive = torch.nn.AdaptiveLogSoftmaxWithLoss(
            input_dim, self.num_words, cutoffs, div_value=div_value, head_bias=head_bias
        )

    def log_probabilities(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Shape `(num_targets, num_words)`: the log-probability of every word."""
        return self.adaptive.log_prob(hidden_states)

    def target_loss(
        self, hidden_states: torch.Tensor, target_ids: torch.LongTensor
    ) -> torch.Tensor:
        # torch's module takes its softmaxes from its products' dtype: under autocast, all in float32.
        with torch.autocast(hidden_states.device.type, enabled=False):
            return -self.adaptive(at_least_float32(hidden_states), target_ids).output
