"""Which of an `elmoc_bilm`'s language models trains each parameter, read from the parameter names."""

import logging
import re
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.checks import check_one_of

logger = logging.getLogger(__name__)

_LSTM_LAYER = re.compile(r"^_contextualizer\.(forward|backward)_layer(?:s|_norms)\.(\d+)\.")
_INPUT_PREFIXES = ("_contextualizer.", "_text_field_embedder.", "_target_embedder.")
_BACKWARD_INPUT = (
    "_contextualizer.backward_input_projection.",
    "_contextualizer.backward_input_layer_norm.",
)
_FORWARD_INPUT = ("_contextualizer.input_projection.", "_contextualizer.input_layer_norm.")
OUTPUT_LAYER_PREFIX, BACKWARD_OUTPUT_LAYER_PREFIX = "_output_layer.", "_backward_output_layer."


class BilmDirections:
    """
    The direction handling of `BidirectionalLanguageModel`: which LM (`"forward"`, `"backward"` or
    both) each parameter serves, the parameters by ELMo layer, and training one direction alone.
    """

    _directions: str
    _contextualizer: torch.nn.Module
    _output_layer: torch.nn.Module
    _backward_output_layer: Optional[torch.nn.Module]

    @property
    def directions(self) -> str:
        """`"both"`, `"forward"` or `"backward"`: the language models this model trains."""
        return self._directions

    def trains(self, direction: str) -> bool:
        return self._directions in ("both", direction)

    def output_layer(self, direction: str = "forward") -> torch.nn.Module:
        """The output layer of the `"forward"` or `"backward"` LM (the same one when shared)."""
        if direction == "backward" and self._backward_output_layer is not None:
            return self._backward_output_layer
        return self._output_layer

    @staticmethod
    def parameter_directions(parameter_names: Iterable[str]) -> Dict[str, Optional[str]]:
        """Each parameter name's one training direction, or `None` if both use it (names only)."""
        names = list(parameter_names)
        separate_inputs = any(name.startswith(_BACKWARD_INPUT) for name in names)
        separate_heads = any(name.startswith(BACKWARD_OUTPUT_LAYER_PREFIX) for name in names)
        directions: Dict[str, Optional[str]] = {}
        for name in names:
            layer = _LSTM_LAYER.match(name)
            if layer:
                directions[name] = layer.group(1)
            elif name.startswith(_BACKWARD_INPUT) or name.startswith(BACKWARD_OUTPUT_LAYER_PREFIX):
                directions[name] = "backward"
            elif (separate_inputs and name.startswith(_FORWARD_INPUT)) or (
                separate_heads and name.startswith(OUTPUT_LAYER_PREFIX)
            ):
                directions[name] = "forward"
            else:
                directions[name] = None
        return directions

    def _named_directions(self) -> Iterator[Tuple[str, torch.nn.Parameter, Optional[str]]]:
        """`(name, parameter, direction)` of every parameter (direction `None`: both use it)."""
        named = list(self.named_parameters())  # type: ignore[attr-defined]
        trained_by = self.parameter_directions(name for name, _ in named)
        return ((name, parameter, trained_by[name]) for name, parameter in named)

    def direction_parameters(self, direction: str) -> Iterator[Tuple[str, torch.nn.Parameter]]:
        """The trainable parameters the `"forward"` or `"backward"` LM's loss depends on."""
        check_one_of(direction, ("forward", "backward"), "direction")
        return (
            (name, parameter)
            for name, parameter, trained_by in self._named_directions()
            if parameter.requires_grad and trained_by in (None, direction)
        )

    @staticmethod
    def layer_groups(parameter_names: Iterable[str]) -> List[Tuple[str, List[str]]]:
        """Parameter names by ELMo layer: `"layer 0"` (input), `"layer 1"` to `"layer L"`, `"output"`."""
        input_names: List[str] = []
        layers: Dict[int, List[str]] = {}
        output_names: List[str] = []
        unknown: List[str] = []
        for name in parameter_names:
            match = _LSTM_LAYER.match(name)
            if match:
                layers.setdefault(int(match.group(2)), []).append(name)
            elif name.startswith((OUTPUT_LAYER_PREFIX, BACKWARD_OUTPUT_LAYER_PREFIX)):
                output_names.append(name)
            elif name.startswith(_INPUT_PREFIXES):
                input_names.append(name)
            else:
                unknown.append(name)
        if unknown:
            raise ConfigurationError(f"Parameters {unknown} are not part of an 'elmoc_bilm' layer")
        if sorted(layers) != list(range(len(layers))):
            raise ConfigurationError(f"biLM LSTM layers {sorted(layers)} are not numbered 0..L-1")
        groups = [("layer 0", input_names)]
        groups.extend((f"layer {index + 1}", layers[index]) for index in sorted(layers))
        groups.append(("output", output_names))
        return [(label, names) for label, names in groups if names]

    def _freeze_other_direction(self) -> None:
        """Freezes all but the parameters of `directions`, the one LM trained (`elmoc-merge-bilm`)."""
        directions, contextualizer = self._directions, self._contextualizer
        if not all(hasattr(contextualizer, name) for name in ("forward_layers", "backward_layers")):
            raise ConfigurationError(
                f"model.directions = {directions!r} needs a contextualizer with forward_layers and "
                f"backward_layers (e.g. elmoc_lstm), not {type(contextualizer).__name__}"
            )
        if hasattr(contextualizer, "input_projection") and not getattr(
            contextualizer, "separate_input_projections", False
        ):
            logger.warning(
                "model.directions = %r: the shared input projection stays frozen; set the "
                "contextualizer's separate_input_projections to train one per direction",
                directions,
            )
        for name, parameter, trained_by in self._named_directions():
            shared_encoder = trained_by is None and name.startswith("_contextualizer.")
            if trained_by not in (None, directions) or shared_encoder:
                parameter.requires_grad_(False)
