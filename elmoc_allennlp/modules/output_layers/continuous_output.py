from typing import Dict, Optional

import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.checks import check_one_of, check_positive
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.output_layers.von_mises_fisher import (
    MIN_VMF_DIMENSION,
    von_mises_fisher_log_normalizer,
)

_LOSSES = ("cosine", "l2", "vmf")


@LanguageModelOutputLayer.register("elmoc_continuous")
class ContinuousOutputLayer(LanguageModelOutputLayer):
    """
    The continuous output layer of ELMo-C ([Li et al., 2019](https://arxiv.org/abs/1902.11269),
    section 3): a linear map from the hidden state to the dimension of a frozen pretrained word
    embedding, trained to point at the target word's vector. It has `input_dim · embedding_dim +
    embedding_dim` parameters whatever the vocabulary size, and no softmax normalisation.

    Registered as a `LanguageModelOutputLayer` with name "elmoc_continuous".

    # Parameters

    input_dim : `int`
        Dimension of the hidden states (the LSTM projection size, 512 in the paper).
    embedding_dim : `int`
        Dimension of the target vectors (300 for fastText).
    loss : `str`, optional (default = `"cosine"`)
        `"cosine"`: 1 − cos(Wh, e) (the paper's choice); `"l2"`: the squared Euclidean distance
        ‖Wh − e‖²; `"vmf"`: the von Mises-Fisher negative log-likelihood of the unit-normalised
        target with mean direction and concentration given by the prediction (Kumar & Tsvetkov,
        ICLR 2019, "Von Mises-Fisher Loss for Training Sequence to Sequence Models with Continuous
        Outputs"): −log C_m(‖ê‖) − êᵀe/‖e‖ + λ‖ê‖. Needs `embedding_dim` ≥ 12, where the
        expansion of log C_m is accurate (see `von_mises_fisher`).
    vmf_norm_penalty : `float`, optional (default = `0.02`)
        λ of the "NLLvMF reg1" variant above (0.02 in Kumar & Tsvetkov); only used with `"vmf"`.
    """

    def __init__(
        self,
        input_dim: int,
        embedding_dim: int,
        loss: str = "cosine",
        vmf_norm_penalty: float = 0.02,
    ) -> None:
        super().__init__()
        check_one_of(loss, _LOSSES, "output_layer.loss")
        check_positive(input_dim, "output_layer.input_dim")
        check_positive(embedding_dim, "output_layer.embedding_dim")
        if loss == "vmf" and embedding_dim < MIN_VMF_DIMENSION:
            raise ConfigurationError(
                f"output_layer.embedding_dim is {embedding_dim}, but output_layer.loss 'vmf' "
                f"needs at least {MIN_VMF_DIMENSION}: below that its log-Bessel expansion is not "
                "accurate. Use 'cosine' or 'l2' for such small embeddings."
            )
        self._input_dim = input_dim
        self._embedding_dim = embedding_dim
        self._loss = loss
        self._vmf_norm_penalty = vmf_norm_penalty
        self.projection = torch.nn.Linear(input_dim, embedding_dim)

    def get_input_dim(self) -> int:
        return self._input_dim

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
        if target_embeddings.size(-1) != self._embedding_dim:
            raise ConfigurationError(
                f"output_layer.embedding_dim is {self._embedding_dim} but the target vectors have "
                f"dimension {target_embeddings.size(-1)}"
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
