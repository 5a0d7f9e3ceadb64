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
from typing import Dict, List, Tuple

import torch

from allennlp.common import Lazy
from allennlp.common.checks import ConfigurationError
from allennlp.training.optimizers import Optimizer

logger = logging.getLogger(__name__)

# Parameter names of `BidirectionalLanguageModel` and its encoders (`elmoc_lstm`,
# `elmoc_interlayer_norm_lstm`): per-layer modules are `forward_layers.<i>` and
# `backward_layers.<i>` (and `<direction>_layer_norms.<i>`).
_LAYER = re.compile(r"^_contextualizer\.(?:forward|backward)_layer(?:s|_norms)\.(\d+)\.")
_INPUT_PREFIXES = ("_contextualizer.", "_text_field_embedder.", "_target_embedder.")
_OUTPUT_PREFIXES = ("_output_layer.", "_backward_output_layer.")


def bilm_layer_groups(parameter_names: List[str]) -> List[Tuple[str, List[str]]]:
    """
    Sorts the parameter names of a `BidirectionalLanguageModel` into its layers, bottom to top:
    `("layer 0", ...)`, the input side (the input projection and its LayerNorm, and any trainable
    input embedding), `("layer 1", ...)` to `("layer L", ...)`, the L LSTM layers of both
    directions, and `("output", ...)`, the output layer(s). Layers are numbered as ELMo numbers
    its representations. A name that fits none raises a `ConfigurationError`.
    """
    input_names: List[str] = []
    layers: Dict[int, List[str]] = {}
    output_names: List[str] = []
    unknown: List[str] = []
    for name in parameter_names:
        match = _LAYER.match(name)
        if match:
            layers.setdefault(int(match.group(1)), []).append(name)
        elif name.startswith(_OUTPUT_PREFIXES):
            output_names.append(name)
        elif name.startswith(_INPUT_PREFIXES):
            input_names.append(name)
        else:
            unknown.append(name)
    if unknown:
        raise ConfigurationError(
            f"Parameters {unknown} are not part of a biLM layer (input side, LSTM layer or output "
            "layer); 'elmoc_bilm_layerwise' groups the parameters of an 'elmoc_bilm' model"
        )
    if sorted(layers) != list(range(len(layers))):
        raise ConfigurationError(f"biLM LSTM layers {sorted(layers)} are not numbered 0..L-1")
    groups = [("layer 0", input_names)]
    groups.extend((f"layer {index + 1}", layers[index]) for index in sorted(layers))
    groups.append(("output", output_names))
    return [(label, names) for label, names in groups if names]


@Optimizer.register("elmoc_bilm_layerwise", constructor="from_partial_optimizer")
class BilmLayerwiseOptimizer(Optimizer):
    """
    A constructor, not an optimizer of its own: returns the optimizer given as `optimizer` (any
    registered `Optimizer`, e.g. `adam`) with one parameter group per layer of the biLM being
    trained, bottom to top (see `bilm_layer_groups`): the input side, each LSTM layer (forward
    and backward together), the output layer, then allennlp's default group, which stays empty.
    That is the order allennlp's `slanted_triangular` scheduler expects for
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
        groups = bilm_layer_groups([name for name, _ in model_parameters])
        for label, names in groups:
            logger.info("Parameter group %s: %s", label, ", ".join(names))
        parameter_groups = [
            ([f"^{re.escape(name)}$" for name in names], {}) for _, names in groups
        ]
        return optimizer.construct(
            model_parameters=model_parameters, parameter_groups=parameter_groups
        )
