from typing import Optional

import torch
import torch.nn.functional as F

from allennlp.common.checks import check_dimensions_match
from allennlp.data import Vocabulary

from elmoc_allennlp.common.checks import check_positive
from elmoc_allennlp.common.precision import at_least_float32
from elmoc_allennlp.modules.output_layers.output_layer import (
    ClosedVocabularyOutputLayer,
    LanguageModelOutputLayer,
)


@LanguageModelOutputLayer.register("elmoc_softmax")
class SoftmaxOutputLayer(ClosedVocabularyOutputLayer):
    """
    A full softmax over a closed vocabulary: logits `W h + b` with the output embedding `W`
    (`num_words x embedding_dim`), after a `Linear` projection of `h` if `embedding_dim` differs
    from `input_dim`. `tie_weights` ties `W` to an input embedding (ELMo-Sub).

    Registered as a `LanguageModelOutputLayer` with name "elmoc_softmax".

    # Parameters

    vocab : `Vocabulary`
        The model's vocabulary; `vocab_namespace` in it gives the closed set of words scored.
    input_dim : `int`
        Dimension of the hidden states scored (the contextualizer's `projection_dim`).
    vocab_namespace : `str`, optional (default = `"targets"`)
        The namespace of the target ids: that of the model's `target_indexer` (`"targets"` in the
        pretraining configs). It must be sorted by decreasing frequency, as allennlp's
        `from_instances` vocabulary is.
    embedding_dim : `int`, optional (default = `None`)
        Dimension of the output embedding `W`; when it differs from `input_dim`, the hidden state
        is projected to it by a trained `Linear`. `None` means `input_dim` (no projection).
    """

    def __init__(
        self,
        vocab: Vocabulary,
        input_dim: int,
        vocab_namespace: str = "targets",
        embedding_dim: Optional[int] = None,
    ) -> None:
        super().__init__(vocab, input_dim, vocab_namespace)
        embedding_dim = embedding_dim or input_dim
        check_positive(embedding_dim, "output_layer.embedding_dim")
        self._embedding_dim = embedding_dim
        self.projection: Optional[torch.nn.Linear] = (
            torch.nn.Linear(input_dim, embedding_dim) if embedding_dim != input_dim else None
        )
        self.weight = torch.nn.Parameter(
            torch.randn(self.num_words, embedding_dim) / embedding_dim**0.5
        )
        self.bias = torch.nn.Parameter(torch.zeros(self.num_words))

    def tie_weights(self, weight: torch.nn.Parameter) -> None:
        """Makes `weight`, an input embedding `(num_words, embedding_dim)`, the output embedding."""
        check_dimensions_match(
            weight.size(0), self.num_words, "tied embedding rows", "output_layer.num_words"
        )
        check_dimensions_match(
            weight.size(1), self._embedding_dim, "tied embedding dim", "embedding_dim"
        )
        self.weight = weight

    def logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Shape `(num_targets, num_words)`: the unnormalised scores of every word."""
        if self.projection is not None:
            hidden_states = self.projection(hidden_states)
        return F.linear(hidden_states, self.weight, self.bias.view(-1))

    def target_loss(
        self, hidden_states: torch.Tensor, target_ids: torch.LongTensor
    ) -> torch.Tensor:
        # At most 2^25 logits at once (a row is `num_words` wide).
        chunk = max(1, 2**25 // self.num_words)
        losses = []
        for start in range(0, hidden_states.size(0), chunk):
            # Under autocast the product runs in its low precision, the softmax in float32.
            logits = at_least_float32(self.logits(hidden_states[start : start + chunk]))
            losses.append(
                F.cross_entropy(logits, target_ids[start : start + chunk], reduction="none")
            )
        return torch.cat(losses)
