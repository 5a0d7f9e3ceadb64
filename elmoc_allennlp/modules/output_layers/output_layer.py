from typing import Dict, Optional

import torch

from allennlp.common import Registrable
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmoc_allennlp.common.checks import check_positive


class LanguageModelOutputLayer(torch.nn.Module, Registrable):
    """
    The output layer of a language model: the contextualizer's state at each predicting position to a
    loss against the target word, its vector (continuous heads, ELMo-C) or its id in a closed vocabulary
    (softmax-family heads, `requires_target_ids`). The model masks and averages. Subclasses implement `score`.

    # Parameters

    input_dim : `int`
        Dimension of the hidden states (the LSTM projection size).
    """

    requires_target_ids: bool = False

    def __init__(self, input_dim: int) -> None:
        super().__init__()
        check_positive(input_dim, "output_layer.input_dim")
        self._input_dim = input_dim

    def get_input_dim(self) -> int:
        return self._input_dim

    def forward(
        self,
        hidden_states: torch.Tensor,
        target_embeddings: Optional[torch.Tensor] = None,
        target_ids: Optional[torch.LongTensor] = None,
    ) -> Dict[str, torch.Tensor]:
        """
        `hidden_states` `(num_targets, input_dim)`, and the targets' vectors `(num_targets, embedding_dim)`
        (continuous heads) or ids `(num_targets,)` (softmax family). Returns `"loss"` `(num_targets,)` and,
        for continuous heads, `"predictions"` `(num_targets, embedding_dim)`.
        """
        needed = "target_ids" if self.requires_target_ids else "target_embeddings"
        targets = target_ids if self.requires_target_ids else target_embeddings
        if targets is None:
            raise ValueError(f"{type(self).__name__} needs {needed}")
        return self.score(hidden_states, targets)

    def score(self, hidden_states: torch.Tensor, targets: torch.Tensor) -> Dict[str, torch.Tensor]:
        """`forward` given the targets this head needs (ids or vectors)."""
        raise NotImplementedError


class ClosedVocabularyOutputLayer(LanguageModelOutputLayer):
    """
    A softmax-family head over the `num_words` entries (padding and OOV included) of a
    vocabulary namespace, which must be sorted by decreasing frequency (allennlp's
    `from_instances` vocabulary is). Subclasses implement `target_loss`.

    # Parameters

    vocab : `Vocabulary`
        The model's vocabulary; `vocab_namespace` in it gives the closed set of words scored.
    input_dim : `int`
        Dimension of the hidden states scored (the contextualizer's `projection_dim`).
    vocab_namespace : `str`
        The namespace of the target ids (that of the model's `target_indexer`).
    """

    requires_target_ids = True

    def __init__(self, vocab: Vocabulary, input_dim: int, vocab_namespace: str) -> None:
        super().__init__(input_dim)
        self.num_words = vocab.get_vocab_size(vocab_namespace)
        if self.num_words <= 2:
            raise ConfigurationError(
                f"output_layer.vocab_namespace is '{vocab_namespace}', but that namespace has "
                f"{self.num_words} entries: index the tokens with a single_id indexer in it and "
                "build the vocabulary from the corpus (vocabulary.type 'from_instances')"
            )

    def target_loss(
        self, hidden_states: torch.Tensor, target_ids: torch.LongTensor
    ) -> torch.Tensor:
        """The negative log-likelihood of each target, shape `(num_targets,)`."""
        raise NotImplementedError

    def score(self, hidden_states: torch.Tensor, targets: torch.Tensor) -> Dict[str, torch.Tensor]:
        if hidden_states.size(0) == 0:
            return {"loss": hidden_states.new_zeros(0)}
        return {"loss": self.target_loss(hidden_states, targets)}
