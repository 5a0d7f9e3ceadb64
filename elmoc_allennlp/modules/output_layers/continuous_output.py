from typing import Dict

import torch
import torch.nn.functional as F

from allennlp.common.checks import check_dimensions_match

from elmoc_allennlp.common.checks import check_one_of, check_positive
from elmoc_allennlp.common.precision import at_least_float32
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer


@LanguageModelOutputLayer.register("elmoc_continuous")
class ContinuousOutputLayer(LanguageModelOutputLayer):
    """
    The continuous output layer of ELMo-C ([Li et al., 2019](https://arxiv.org/abs/1902.11269),
    section 3): a linear map from the hidden state to a frozen pretrained embedding's dimension,
    trained to point at the target word's vector; its size does not depend on the vocabulary.

    Registered as a `LanguageModelOutputLayer` with name "elmoc_continuous".

    # Parameters

    input_dim : `int`
        Dimension of the hidden states (512 in the paper).
    embedding_dim : `int`
        Dimension of the target vectors (300 for fastText).
    loss : `str`, optional (default = `"cosine"`)
        `"cosine"`: 1 − cos(Wh, e) (the paper's); `"l2"`: ‖Wh − e‖².
    """

    def __init__(self, input_dim: int, embedding_dim: int, loss: str = "cosine") -> None:
        super().__init__(input_dim)
        check_one_of(loss, ("cosine", "l2"), "output_layer.loss")
        check_positive(embedding_dim, "output_layer.embedding_dim")
        self._embedding_dim = embedding_dim
        self._loss = loss
        self.projection = torch.nn.Linear(input_dim, embedding_dim)

    def get_output_dim(self) -> int:
        return self._embedding_dim

    def score(self, hidden_states: torch.Tensor, targets: torch.Tensor) -> Dict[str, torch.Tensor]:
        check_dimensions_match(
            targets.size(-1), self._embedding_dim, "target vector dim", "output_layer.embedding_dim"
        )
        # Under autocast the map runs in its low precision, the loss in float32.
        predictions = at_least_float32(self.projection(hidden_states))
        targets = targets.to(predictions.dtype)
        if self._loss == "cosine":
            loss = 1.0 - F.cosine_similarity(predictions, targets, dim=-1, eps=1e-8)
        else:
            loss = (predictions - targets).pow(2).sum(-1)
        return {"loss": loss, "predictions": predictions}
