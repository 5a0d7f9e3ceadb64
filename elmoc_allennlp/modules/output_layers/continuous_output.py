import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError, check_dimensions_match

from elmoc_allennlp.common.checks import check_one_of, check_positive
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer

# log C_m(κ) = (m/2 − 1) log κ − (m/2) log(2π) − log I_{m/2−1}(κ) of the von Mises-Fisher distribution.
# I_v over- and underflows float64 at m = 300: `log_bessel_iv` uses the uniform asymptotic (Debye)
# expansion with two correction terms (Abramowitz & Stegun 9.7.7; DLMF 10.41.3), accurate to 1e-4
# for v ≥ 5, hence m ≥ `MIN_VMF_DIMENSION`.
MIN_VMF_DIMENSION = 12  # the smallest m with m/2 - 1 >= 5


def log_bessel_iv(order: float, kappa: torch.Tensor) -> torch.Tensor:
    """
    log I_v(κ) for a fixed order `v > 0`, elementwise.

    # Parameters

    order : `float`
        The order v (m/2 − 1 for the vMF normalizer in dimension m).
    kappa : `torch.Tensor`
        Positive values, any shape.
    """
    if order <= 0:
        raise ValueError(f"log_bessel_iv needs a positive order, got {order}")
    z = kappa / order
    root = torch.sqrt(1.0 + z * z)
    eta = root + torch.log(z / (1.0 + root))
    t = 1.0 / root
    t2 = t * t
    u1 = t * (3.0 - 5.0 * t2) / 24.0
    u2 = t2 * (81.0 - 462.0 * t2 + 385.0 * t2 * t2) / 1152.0
    series = 1.0 + u1 / order + u2 / (order * order)
    return (
        order * eta
        - 0.5 * math.log(2.0 * math.pi * order)
        + 0.5 * torch.log(t)
        + torch.log(series)
    )


def von_mises_fisher_log_normalizer(kappa: torch.Tensor, dimension: int) -> torch.Tensor:
    """log C_m(κ) in `dimension` = m dimensions, elementwise over `kappa`."""
    order = dimension / 2.0 - 1.0
    return (
        order * torch.log(kappa)
        - (dimension / 2.0) * math.log(2.0 * math.pi)
        - log_bessel_iv(order, kappa)
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
        −log C_m(‖ê‖) − êᵀe/‖e‖ + λ‖ê‖, which needs `embedding_dim` ≥ 12 (see `log_bessel_iv`).
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
