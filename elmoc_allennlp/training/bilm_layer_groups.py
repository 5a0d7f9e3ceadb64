"""
One optimizer parameter group per biLM layer, bottom to top, for ULMFiT-style fine-tuning
(Howard & Ruder 2018, section 3.2-3.3) with allennlp's `slanted_triangular` scheduler: its
`discriminative_fine_tuning` divides the learning rate by 1 / `decay_factor` per group going down
from the last group, and its `gradual_unfreezing` trains the last group in the first epoch, the
last two in the second, and so on. Both read the optimizer's parameter groups in order, with the
default (last) group empty.
"""
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
    A constructor, not an optimizer of its own: returns the optimizer given as `optimizer` (any
    registered `Optimizer`, e.g. `adam`) with one parameter group per layer of the biLM being
    trained, bottom to top (see `BidirectionalLanguageModel.layer_groups`): the input side, each
    LSTM layer (forward and backward together), the output layer, then allennlp's default group,
    which stays empty. That is the order allennlp's `slanted_triangular` scheduler expects for
    `discriminative_fine_tuning` and `gradual_unfreezing`, and it works for any number of LSTM
    layers without naming parameters in the config. The groups are logged.

    Registered as an `Optimizer` with name "elmoc_bilm_layerwise".

    # Parameters

    model_parameters : `List[Tuple[str, torch.nn.Parameter]]`
        Given by the trainer (the model's trainable parameters).
    optimizer : `Lazy[Optimizer]`
        The optimizer to build, without `parameter_groups` (this constructor sets them).
    """

    @classmethod
    def from_partial_optimizer(
        cls,
        model_parameters: List[Tuple[str, torch.nn.Parameter]],
        optimizer: Lazy[Optimizer],
    ) -> Optimizer:
        if "parameter_groups" in optimizer._params:
            raise ConfigurationError(
                "trainer.optimizer.optimizer.parameter_groups: 'elmoc_bilm_layerwise' makes one "
                "group per biLM layer itself; remove parameter_groups"
            )
        groups = BidirectionalLanguageModel.layer_groups(name for name, _ in model_parameters)
        for label, names in groups:
            logger.info("Parameter group %s: %s", label, ", ".join(names))
        parameter_groups = [
            ([f"^{re.escape(name)}$" for name in names], {}) for _, names in groups
        ]
        return optimizer.construct(
            model_parameters=model_parameters, parameter_groups=parameter_groups
        )
