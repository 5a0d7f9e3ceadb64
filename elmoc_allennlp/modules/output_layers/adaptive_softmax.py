from typing import Dict, List, Optional

import torch

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.output_layers.softmax import closed_vocabulary_size


@LanguageModelOutputLayer.register("elmoc_adaptive_softmax")
class AdaptiveSoftmaxOutputLayer(LanguageModelOutputLayer):
    """
    The adaptive softmax of Grave et al. (2017), as `torch.nn.AdaptiveLogSoftmaxWithLoss`: the
    frequent words (ids below `cutoffs[0]`) and one entry per tail cluster form the head
    softmax; the words of tail cluster `i` (ids in `[cutoffs[i], cutoffs[i + 1])`) are scored
    from a `input_dim / div_value^(i + 1)`-dimensional projection of the hidden state. This is
    the output layer of ELMo-A, the adaptive-softmax baseline of Li et al. (2019). The loss is
    the exact negative log-likelihood, in training and evaluation alike.

    The vocabulary must be sorted by decreasing frequency (allennlp's `from_instances`
    vocabulary is), so that the cutoffs split it into frequency bands.

    Registered as a `LanguageModelOutputLayer` with name "elmoc_adaptive_softmax".

    # Parameters

    vocab : `Vocabulary`
    input_dim : `int`
        Dimension of the hidden states.
    cutoffs : `List[int]`
        Increasing ids, each below the vocabulary size, where the head and each tail cluster
        end. The configs of `training_configs/pretrain/` document the cutoffs that give the
        paper's parameter counts.
    vocab_namespace : `str`, optional (default = `"targets"`)
    div_value : `float`, optional (default = `4.0`)
        The projection of tail cluster `i` has dimension `input_dim // div_value^(i + 1)`.
    head_bias : `bool`, optional (default = `False`)
        Whether the head softmax has a bias.
    """

    requires_target_ids = True

    def __init__(
        self,
        vocab: Vocabulary,
        input_dim: int,
        cutoffs: List[int],
        vocab_namespace: str = "targets",
        div_value: float = 4.0,
        head_bias: bool = False,
    ) -> None:
        super().__init__()
        num_words = closed_vocabulary_size(vocab, vocab_namespace, "output_layer.vocab_namespace")
        cutoffs = list(cutoffs)
        if (
            not cutoffs
            or cutoffs != sorted(set(cutoffs))
            or cutoffs[0] <= 0
            or cutoffs[-1] >= num_words
        ):
            raise ConfigurationError(
                f"output_layer.cutoffs must be distinct increasing ids between 1 and "
                f"{num_words - 1} (the vocabulary of '{vocab_namespace}' has {num_words} "
                f"entries), got {cutoffs}"
            )
        if div_value < 1.0:
            raise ConfigurationError(f"output_layer.div_value must be >= 1, got {div_value}")
        smallest = int(input_dim // (div_value ** len(cutoffs)))
        if smallest < 1:
            raise ConfigurationError(
                f"output_layer.div_value={div_value} with {len(cutoffs)} cutoffs leaves the last "
                f"tail cluster an empty projection of input_dim={input_dim}"
            )
        self._input_dim = input_dim
        self._num_words = num_words
        self.adaptive = torch.nn.AdaptiveLogSoftmaxWithLoss(
            input_dim, num_words, cutoffs, div_value=div_value, head_bias=head_bias
        )

    def get_input_dim(self) -> int:
        return self._input_dim

    @property
    def num_words(self) -> int:
        return self._num_words

    def log_probabilities(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Shape `(num_targets, num_words)`: the log-probability of every word."""
        return self.adaptive.log_prob(hidden_states)

    def forward(
        self,
        hidden_states: torch.Tensor,
        target_embeddings: Optional[torch.Tensor] = None,
        target_ids: Optional[torch.LongTensor] = None,
    ) -> Dict[str, torch.Tensor]:
        if target_ids is None:
            raise ValueError("AdaptiveSoftmaxOutputLayer needs target_ids")
        if hidden_states.size(0) == 0:
            return {"loss": hidden_states.new_zeros(0)}
        target_log_probabilities = self.adaptive(hidden_states, target_ids).output
        return {"loss": -target_log_probabilities}
