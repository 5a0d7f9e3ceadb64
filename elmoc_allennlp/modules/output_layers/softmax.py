from typing import Dict, Optional

import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError, check_dimensions_match
from allennlp.data import Vocabulary

from elmoc_allennlp.common.checks import check_positive
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer


def closed_vocabulary_size(vocab: Vocabulary, vocab_namespace: str, config_key: str) -> int:
    """
    The number of classes of a softmax-family head: the size of `vocab_namespace` (padding and
    OOV included). Raises a `ConfigurationError` naming `config_key` if the namespace is empty,
    which happens when the dataset reader has no single-id indexer in that namespace or the
    vocabulary was built without it.
    """
    num_words = vocab.get_vocab_size(vocab_namespace)
    if num_words <= 2:
        raise ConfigurationError(
            f"{config_key} is '{vocab_namespace}', but that vocabulary namespace has {num_words} "
            "entries: index the tokens with a single_id indexer in that namespace and build the "
            "vocabulary from the corpus (vocabulary.type 'from_instances')"
        )
    return num_words


@LanguageModelOutputLayer.register("elmoc_softmax")
class SoftmaxOutputLayer(LanguageModelOutputLayer):
    """
    A full softmax over a closed vocabulary: the logits of every word are `W h + b`, where `W`
    (`num_words x embedding_dim`) is the output embedding. The loss is the negative log-likelihood
    of the target word. Cost: `num_words · embedding_dim` multiply-adds per target, and as many
    parameters, which is what ELMo-C's continuous output layer avoids.

    With `embedding_dim` different from `input_dim`, the hidden state is first projected to
    `embedding_dim` (a `Linear` layer). The output embedding can be tied to an input embedding
    (ELMo-Sub, the subword LM baseline) with `tie_weights`.

    Registered as a `LanguageModelOutputLayer` with name "elmoc_softmax".

    # Parameters

    vocab : `Vocabulary`
        Gives the number of classes: the size of `vocab_namespace`.
    input_dim : `int`
        Dimension of the hidden states (the LSTM projection size).
    vocab_namespace : `str`, optional (default = `"targets"`)
        The namespace of the target ids (that of the model's `target_indexer`). Build it by
        frequency, with a size cap (`vocabulary.max_vocab_size`), as allennlp does.
    embedding_dim : `int`, optional (default = `input_dim`)
        Dimension of the output embedding.
    """

    requires_target_ids = True

    def __init__(
        self,
        vocab: Vocabulary,
        input_dim: int,
        vocab_namespace: str = "targets",
        embedding_dim: Optional[int] = None,
    ) -> None:
        super().__init__()
        embedding_dim = embedding_dim or input_dim
        check_positive(input_dim, "output_layer.input_dim")
        check_positive(embedding_dim, "output_layer.embedding_dim")
        self._input_dim = input_dim
        self._embedding_dim = embedding_dim
        self._vocab_namespace = vocab_namespace
        self._num_words = closed_vocabulary_size(vocab, vocab_namespace, "output_layer.vocab_namespace")
        self.projection: Optional[torch.nn.Linear] = (
            torch.nn.Linear(input_dim, embedding_dim) if embedding_dim != input_dim else None
        )
        self.weight = torch.nn.Parameter(
            torch.randn(self._num_words, embedding_dim) / embedding_dim ** 0.5
        )
        self.bias = torch.nn.Parameter(torch.zeros(self._num_words))

    def get_input_dim(self) -> int:
        return self._input_dim

    @property
    def num_words(self) -> int:
        return self._num_words

    def tie_weights(self, weight: torch.nn.Parameter) -> None:
        """
        Makes `weight`, an input embedding of shape `(num_words, embedding_dim)` (e.g. an
        `Embedding` token embedder's `weight` over the same namespace), the output embedding.
        """
        check_dimensions_match(
            weight.size(0), self._num_words, "tied embedding rows", "output_layer vocabulary size"
        )
        check_dimensions_match(
            weight.size(1), self._embedding_dim, "tied embedding dim", "output_layer.embedding_dim"
        )
        self.weight = weight

    def logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Shape `(num_targets, num_words)`: the unnormalised scores of every word."""
        if self.projection is not None:
            hidden_states = self.projection(hidden_states)
        return F.linear(hidden_states, self.weight, self.bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        target_embeddings: Optional[torch.Tensor] = None,
        target_ids: Optional[torch.LongTensor] = None,
    ) -> Dict[str, torch.Tensor]:
        if target_ids is None:
            raise ValueError("SoftmaxOutputLayer needs target_ids")
        loss = F.cross_entropy(self.logits(hidden_states), target_ids, reduction="none")
        return {"loss": loss}
