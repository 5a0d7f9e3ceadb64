from typing import Dict, Optional

import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError, check_dimensions_match

from elmoc_allennlp.common.checks import check_one_of, check_positive
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.output_layers.von_mises_fisher import (
    MIN_VMF_DIMENSION,
    von_mises_fisher_log_normalizer,
)


@LanguageModelOutputLayer.register("elmoc_continuous")
class ContinuousOutputLayer(LanguageModelOutputLayer):
    """
    The continuous output layer of ELMo-C ([Li et al., 2019](https://arxiv.org/abs/1902.11269),
    section 3): a linear map from the hidden state to the dimension of a frozen pretrained word
    embedding, trained to point at the target word's vector. No softmax; its size does not
    depend on the vocabulary.

    Registered as a `LanguageModelOutputLayer` with name "elmoc_continuous".

    # Parameters

    input_dim : `int`
        Dimension of the hidden states (512 in the paper).
    embedding_dim : `int`
        Dimension of the target vectors (300 for fastText).
    loss : `str`, optional (default = `"cosine"`)
        `"cosine"`: 1 − cos(Wh, e) (the paper's); `"l2"`: ‖Wh − e‖²; `"vmf"`: the von
        Mises-Fisher negative log-likelihood of Kumar & Tsvetkov (ICLR 2019),
        −log C_m(‖ê‖) − êᵀe/‖e‖ + λ‖ê‖, which needs `embedding_dim` ≥ 12 (see `von_mises_fisher`).
    vmf_norm_penalty : `float`, optional (default = `0.02`)
        λ of the "NLLvMF reg1" variant (Kumar & Tsvetkov's 0.02); only used with `"vmf"`.
    """

    def __init__(
        self,
        input_dim: int,
        embedding_dim: int,
        loss: str = "cosine",
        vmf_norm_penalty: float = 0.02,
    ) -> None:
        super().__init__(input_dim)
        check_one_of(loss, ("cosine", "l2", "vmf"), "output_layer.loss")
        check_positive(embedding_dim, "output_layer.embedding_dim")
        if loss == "vmf" and embedding_dim < MIN_VMF_DIMENSION:
            raise ConfigurationError(
                f"output_layer.embedding_dim is {embedding_dim}, but output_layer.loss 'vmf' "
                f"needs at least {MIN_VMF_DIMENSION}"
            )
        self._embedding_dim = embedding_dim
        self._loss = loss
        self._vmf_norm_penalty = vmf_norm_penalty
        self.projection = torch.nn.Linear(input_dim, embedding_dim)

    def get_output_dim(self) -> int:
        return self._embedding_dim

    def forward(
        self,
        hidden_states: torch.Tensor,
        target_embeddings: Optional[torch.Tensor] = None,
        target_ids: Optional[torch.LongTensor] = None,
    ) -> Dict[str, torch.Tensor]:
        if target_embeddings is None:
            raise ValueError("ContinuousOutputLayer needs target_embeddings")
        check_dimensions_match(
            target_embeddings.size(-1), self._embedding_dim, "target vector dim", "output_layer.embedding_dim"
        )
        predictions = self.projection(hidden_states)
        target_embeddings = target_embeddings.to(predictions.dtype)
        if self._loss == "cosine":
            loss = 1.0 - F.cosine_similarity(predictions, target_embeddings, dim=-1, eps=1e-8)
        elif self._loss == "l2":
            loss = (predictions - target_embeddings).pow(2).sum(-1)
        else:
            kappa = predictions.norm(dim=-1).clamp(min=1e-6)
            unit_targets = F.normalize(target_embeddings, dim=-1, eps=1e-8)
            loss = (
                -von_mises_fisher_log_normalizer(kappa, self._embedding_dim)
                - (predictions * unit_targets).sum(-1)
                + self._vmf_norm_penalty * kappa
            )
        return {"loss": loss, "predictions": predictions}
