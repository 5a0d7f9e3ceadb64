from typing import Dict, Optional

import torch

from allennlp.common import Registrable


class LanguageModelOutputLayer(torch.nn.Module, Registrable):
    """
    The output layer of a language model: it maps the contextualizer's hidden state at each position
    to a loss against the word at the target position (the next word for the forward LM, the
    previous word for the backward LM). The biLM shares one head between both directions.

    Heads come in two families, declared by `requires_target_ids`:

    - continuous heads (ELMo-C) compare a prediction with the target word's (frozen) vector and need
      `target_embeddings`; they have no vocabulary, so every word is a valid target;
    - softmax-family heads score a closed vocabulary and need `target_ids`.

    Subclasses implement `forward`, returning at least `"loss"`: the per-target loss, shape
    `(num_targets,)`, to which the model applies its masking and averaging. (allennlp-models'
    `LanguageModelHead` is another contract: it returns logits over a vocabulary.)
    """

    requires_target_ids: bool = False

    def get_input_dim(self) -> int:
        raise NotImplementedError

    def forward(
        self,
        hidden_states: torch.Tensor,
        target_embeddings: Optional[torch.Tensor] = None,
        target_ids: Optional[torch.LongTensor] = None,
    ) -> Dict[str, torch.Tensor]:
        """
        # Parameters

        hidden_states : `torch.Tensor`
            Shape `(num_targets, input_dim)`: the contextualizer's state at each predicting position.
        target_embeddings : `torch.Tensor`, optional
            Shape `(num_targets, embedding_dim)`: the target words' vectors (continuous heads).
        target_ids : `torch.LongTensor`, optional
            Shape `(num_targets,)`: the target words' ids in the head's vocabulary (softmax heads).

        # Returns

        `Dict[str, torch.Tensor]` with `"loss"` of shape `(num_targets,)` and, for continuous
        heads, `"predictions"` of shape `(num_targets, embedding_dim)`.
        """
        raise NotImplementedError
