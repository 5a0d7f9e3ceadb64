"""`elmoc_bilm_layerwise`: one optimizer parameter group per biLM layer, for ULMFiT-style fine-tuning."""

import logging
import re
from typing import List, Tuple

import torch

from allennlp.common import Lazy
from allennlp.common.checks import ConfigurationError
from allennlp.training.optimizers import Optimizer

from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel

logger = logging.getLogger(__name__)


@Optimizer.register("elmoc_bilm_layerwise", constructor="from_partial_optimizer")
class BilmLayerwiseOptimizer(Optimizer):
    """
    `optimizer` with one parameter group per biLM layer, bottom to top, then an empty default group:
    the order `slanted_triangular` needs for ULMFiT's per-layer options (Howard & Ruder 2018, 3.2-3.3).

    Registered as an `Optimizer` with name "elmoc_bilm_layerwise".

    # Parameters

    model_parameters : `List[Tuple[str, torch.nn.Parameter]]`
        The model's named parameters (given by the trainer, not in the config): a
        `BidirectionalLanguageModel`'s, grouped by its `layer_groups`.
    optimizer : `Lazy[Optimizer]`
        The optimizer to build (e.g. `{"type": "adam", "lr": 2e-3}`), without `parameter_groups`,
        which this makes (one given is an error).
    """

    @classmethod
    def from_partial_optimizer(
        cls, model_parameters: List[Tuple[str, torch.nn.Parameter]], optimizer: Lazy[Optimizer]
    ) -> Optimizer:
        if "parameter_groups" in optimizer._params:
            raise ConfigurationError(
                "trainer.optimizer.optimizer.parameter_groups: 'elmoc_bilm_layerwise' makes one "
                "group per biLM layer itself; remove parameter_groups"
            )
        groups = BidirectionalLanguageModel.layer_groups(name for name, _ in model_parameters)
        for label, names in groups:
            logger.info("Parameter group %s: %s", label, ", ".join(names))
        parameter_groups = [([f"^{re.escape(name)}$" for name in names], {}) for _, names in groups]
        return optimizer.construct(
            model_parameters=model_parameters, parameter_groups=parameter_groups
        )
