import logging
import re
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError, check_dimensions_match
from allennlp.data import TextFieldTensors, Vocabulary
from allennlp.models.model import Model
from allennlp.modules import Seq2SeqEncoder, TextFieldEmbedder
from allennlp.nn import InitializerApplicator, util

from elmoc_allennlp.common.checks import check_one_of
from elmoc_allennlp.models.device_average import DeviceAverage
from elmoc_allennlp.common.fasttext_vectors import FastTextVectors
from elmoc_allennlp.common.vector_health import ConstantBaseline, check_target_vectors
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import returns_all_layers

logger = logging.getLogger(__name__)

_LSTM_LAYER = re.compile(r"^_contextualizer\.(forward|backward)_layer(?:s|_norms)\.(\d+)\.")
_INPUT_PREFIXES = ("_contextualizer.", "_text_field_embedder.", "_target_embedder.")
_BACKWARD_INPUT = (
    "_contextualizer.backward_input_projection.",
    "_contextualizer.backward_input_layer_norm.",
)
_FORWARD_INPUT = ("_contextualizer.input_projection.", "_contextualizer.input_layer_norm.")
OUTPUT_LAYER_PREFIX, BACKWARD_OUTPUT_LAYER_PREFIX = "_output_layer.", "_backward_output_layer."


# Scores held at once while scoring `retrieval_accuracy` (16 MiB in float32): predictions are
# scored in chunks of rows against the candidates, so memory stays bounded for any batch (ours).
RETRIEVAL_SCORE_BUDGET = 2**22


def _first_occurrences(targets: torch.Tensor) -> torch.Tensor:
    """
    The positions of `targets`' rows whose bits no earlier row has, in order: one row per distinct
    vector. Bits rather than values: `-0.0` and `0.0` stay two candidates (harmless: equal scores,
    the earlier is picked), NaN rows are compared like any others, and `torch.unique` sorts integers,
    which torch 1.12 does for every float dtype (its `unique_dim` has no float16).
    """
    rows = targets.reshape(targets.size(0), -1).contiguous()
    as_integers = {2: torch.int16, 4: torch.int32, 8: torch.int64}[rows.element_size()]
    _, inverse, counts = torch.unique(
        rows.view(as_integers), dim=0, return_inverse=True, return_counts=True
    )
    # Each group's rows, in position order, start at the group's offset: that row is its first.
    by_group = torch.sort(inverse, stable=True).indices
    return by_group[counts.cumsum(0) - counts].sort().values


def retrieval_accuracy(
    predictions: torch.Tensor, gold: torch.Tensor, targets: torch.Tensor, deduplicate: bool = True
) -> torch.Tensor:
    """
    The fraction of `predictions` whose nearest of `targets` (cosine) equals their `gold` target by
    value; the `retrieval_accuracy` metric. Equal scores go to the earliest of `targets`, as
    `argmax` over the full `predictions x targets` matrix picks them (scores apart by rounding
    alone may order either way: a chunk's product can round unlike the full matrix's, as CPU and
    CUDA results already differ; the equivalence is tested in tests/models/test_retrieval_scoring.py).

    Scores are computed `RETRIEVAL_SCORE_BUDGET` at a time (rows of predictions against all the
    candidates), so extra memory is that budget plus about one copy of `targets`, whatever the
    number of predictions: the full matrix of 300,000 positions would be 360 GB
    (`python -m benchmarks.retrieval_scoring`). With `deduplicate`, when the full matrix would
    exceed the budget, the candidates are the distinct target vectors (each at its first
    position): a long batch repeats its words, so this also saves most of the time. It costs a
    host sync (`torch.unique`), so training steps pass `deduplicate=False`.

    # Parameters

    predictions : `torch.Tensor`
        `(num_predictions, dim)`, any float dtype (half under autocast).
    gold : `torch.Tensor`
        `(num_predictions, dim)`: each prediction's own target.
    targets : `torch.Tensor`
        `(num_targets, dim)`: the candidates, repeated words included.
    deduplicate : `bool`, optional (default = `True`)
        Score each distinct target once when the full matrix would exceed the budget.

    # Returns

    A 0-dim float32 tensor on the inputs' device (no host read).
    """
    num_predictions = predictions.size(0)
    candidates = targets
    if deduplicate and num_predictions * targets.size(0) > RETRIEVAL_SCORE_BUDGET:
        candidates = targets[_first_occurrences(targets)]
    normalized = F.normalize(candidates, dim=-1).t()
    step = max(1, RETRIEVAL_SCORE_BUDGET // max(candidates.size(0), 1))
    hits = []
    for start in range(0, num_predictions, step):
        scores = F.normalize(predictions[start : start + step], dim=-1) @ normalized
        nearest = candidates[scores.argmax(dim=-1)]
        hits.append((nearest == gold[start : start + step]).all(dim=-1).sum())
    if not hits:
        return predictions.new_zeros(0, dtype=torch.float32).mean()  # NaN: no prediction scored
    # As `.float().mean()`: the count (exact in float32 below 2^24) over the number, in float32.
    return sum(hits[1:], hits[0]).float() / num_predictions


@Model.register("elmoc_bilm")
class BidirectionalLanguageModel(Model):
    """
    An ELMo-style bidirectional language model: a forward and a backward LM on the contextualizer's
    `[forward; backward]` output. ELMo-C uses fastText, `elmoc_lstm` and `elmoc_continuous`
    ([Li et al., 2019](https://arxiv.org/abs/1902.11269)).

    `loss` is a per-direction figure: the mean of the directions' mean per-token losses (as
    bilm-tf's and allennlp-models' `language_model`), so the same number means the same thing for
    one direction or two; it is the `loss` of the progress bar, `training_loss` and
    `validation_loss` in `metrics.json`, and `loss` in `allennlp evaluate`. Metrics:
    `forward_loss`, `backward_loss`, and for continuous heads `cosine_similarity`, `retrieval_accuracy`
    and `constant_baseline_loss` (with `forward_` and `backward_` ones): the cosine loss of the best
    constant prediction, the targets' mean direction, over the same targets (see `ConstantBaseline`;
    a cosine head's `loss` must be well below it). The `elmoc_gradient_descent` trainer steps each
    direction on its own loss.

    Continuous heads need fastText targets that are not degenerate: when the target embedder
    reads a fastText model, its frequent words are measured once at construction, and nearly
    collinear vectors are a `DegenerateVectorsError` (`elmoc_allennlp/common/vector_health.py`).

    Registered as a `Model` with name "elmoc_bilm".

    # Parameters

    vocab : `Vocabulary`
    text_field_embedder : `TextFieldEmbedder`
        Embeds the `tokens` field (fastText vectors in ELMo-C).
    contextualizer : `Seq2SeqEncoder`
        A bidirectional encoder, each half of its output of dimension `output_layer.get_input_dim()`.
    output_layer : `LanguageModelOutputLayer`
        The forward LM's head, shared with the backward LM unless `backward_output_layer` is given.
    target_embedder : `TextFieldEmbedder`, optional (default = `None`)
        Embeds the target words for continuous heads; by default the (frozen) input embeddings.
    target_indexer : `str`, optional (default = `"targets"`)
        For softmax-family heads: the `tokens` indexer that gives the target ids (not embedded).
    dropout : `float`, optional (default = `0.0`)
        Dropout on the contextualizer's output (authors: `output_layer.dropout` 0.0).
    retrieval_sample_size : `int`, optional (default = `512`)
        Predictions per training batch scored for `retrieval_accuracy` (all of them in evaluation,
        in bounded memory: see `retrieval_accuracy`).
    initializer : `InitializerApplicator`, optional
    directions : `str`, optional (default = `"both"`)
        `"forward"` or `"backward"` trains only that LM (all else frozen), for `elmoc-merge-bilm`; needs
        `forward_layers` and `backward_layers` (as `elmoc_lstm`). Li et al. 2019, footnote 7.
    backward_output_layer : `LanguageModelOutputLayer`, optional (default = `None`)
        A separate head for the backward LM, as the authors' two independent LMs have.
    tie_output_embedding : `str`, optional (default = `None`)
        The key of a `text_field_embedder` `Embedding` tied as the output embedding (ELMo-Sub); the
        output layer must have `tie_weights` (as `elmoc_softmax`).
    """

    default_predictor = "elmoc_bilm"

    def __init__(
        self,
        vocab: Vocabulary,
        text_field_embedder: TextFieldEmbedder,
        contextualizer: Seq2SeqEncoder,
        output_layer: LanguageModelOutputLayer,
        target_embedder: Optional[TextFieldEmbedder] = None,
        target_indexer: str = "targets",
        dropout: float = 0.0,
        retrieval_sample_size: int = 512,
        initializer: Optional[InitializerApplicator] = None,
        directions: str = "both",
        backward_output_layer: Optional[LanguageModelOutputLayer] = None,
        tie_output_embedding: Optional[str] = None,
        **kwargs,
    ) -> None:
        super().__init__(vocab, **kwargs)
        check_one_of(directions, ("both", "forward", "backward"), "model.directions")
        if not contextualizer.is_bidirectional():
            raise ConfigurationError("model.contextualizer must be bidirectional")
        check_dimensions_match(
            text_field_embedder.get_output_dim(),
            contextualizer.get_input_dim(),
            "text_field_embedder output dim",
            "contextualizer input dim",
        )
        check_dimensions_match(
            contextualizer.get_output_dim(),
            2 * output_layer.get_input_dim(),
            "contextualizer output dim",
            "2 * output_layer input dim",
        )
        if backward_output_layer is not None:
            check_dimensions_match(
                backward_output_layer.get_input_dim(),
                output_layer.get_input_dim(),
                "backward_output_layer input dim",
                "output_layer input dim",
            )
            if backward_output_layer.requires_target_ids != output_layer.requires_target_ids:
                raise ConfigurationError(
                    "model.backward_output_layer and model.output_layer must both be continuous "
                    "or both be softmax-family heads"
                )
        if not output_layer.requires_target_ids:
            check_dimensions_match(
                (target_embedder or text_field_embedder).get_output_dim(),
                output_layer.get_output_dim(),
                "target embedding dim",
                "output_layer output dim",
            )
        self._text_field_embedder = text_field_embedder
        self._contextualizer = contextualizer
        self._output_layer = output_layer
        self._backward_output_layer = backward_output_layer
        self._directions = directions
        self._target_embedder = target_embedder
        self._target_indexer = target_indexer
        self._dropout = torch.nn.Dropout(dropout)
        self._retrieval_sample_size = retrieval_sample_size
        self._forward_loss = DeviceAverage()
        self._backward_loss = DeviceAverage()
        self._cosine_similarity = DeviceAverage()
        self._retrieval_accuracy = DeviceAverage()
        self._constant_baselines: Dict[str, ConstantBaseline] = {}
        if not output_layer.requires_target_ids:
            self._check_target_vectors()
            self._constant_baselines = {
                direction: ConstantBaseline(output_layer.get_output_dim())
                for direction in ("forward", "backward")
            }
        if initializer is not None:
            initializer(self)
        if tie_output_embedding is not None:
            self._tie_output_embedding(tie_output_embedding)
        if directions != "both":
            self._freeze_other_direction(directions)

    @property
    def directions(self) -> str:
        """`"both"`, `"forward"` or `"backward"`: the language models this model trains."""
        return self._directions

    @property
    def contextualizer(self) -> Seq2SeqEncoder:
        return self._contextualizer

    @property
    def text_field_embedder(self) -> TextFieldEmbedder:
        return self._text_field_embedder

    def output_layer(self, direction: str = "forward") -> LanguageModelOutputLayer:
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

    def direction_parameters(self, direction: str) -> Iterator[Tuple[str, torch.nn.Parameter]]:
        """The trainable parameters the `"forward"` or `"backward"` LM's loss depends on."""
        check_one_of(direction, ("forward", "backward"), "direction")
        named = list(self.named_parameters())
        trained_by = self.parameter_directions(name for name, _ in named)
        return (
            (name, parameter)
            for name, parameter in named
            if parameter.requires_grad and trained_by[name] in (None, direction)
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

    def _check_target_vectors(self) -> None:
        """Refuses degenerate fastText targets (the target embedder's tables, measured once)."""
        embedder = self._target_embedder or self._text_field_embedder
        tables = {
            id(module.vectors): module.vectors
            for module in embedder.modules()
            if isinstance(getattr(module, "vectors", None), FastTextVectors)
        }
        for vectors in tables.values():
            check_target_vectors(vectors)

    def _tie_output_embedding(self, key: str) -> None:
        token_embedders = getattr(self._text_field_embedder, "_token_embedders", {})
        embedder = token_embedders.get(key)
        if embedder is None or not hasattr(embedder, "weight"):
            raise ConfigurationError(
                f"model.tie_output_embedding is '{key}', but the text_field_embedder has no "
                f"embedding with that key (it has {sorted(token_embedders)})"
            )
        for head in {self.output_layer("forward"), self.output_layer("backward")}:
            if not hasattr(head, "tie_weights"):
                raise ConfigurationError(f"{type(head).__name__} has no output embedding to tie")
            head.tie_weights(embedder.weight)

    def _freeze_other_direction(self, directions: str) -> None:
        contextualizer = self._contextualizer
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
        named = list(self.named_parameters())
        trained_by = self.parameter_directions(name for name, _ in named)
        for name, parameter in named:
            other_direction = trained_by[name] not in (None, directions)
            shared_encoder = trained_by[name] is None and name.startswith("_contextualizer.")
            if other_direction or shared_encoder:
                parameter.requires_grad_(False)

    def forward(self, tokens: TextFieldTensors) -> Dict[str, torch.Tensor]:  # type: ignore
        """
        # Parameters

        tokens : `TextFieldTensors`
            A batch of sentences with their boundary tokens.

        # Returns

        `loss` (the mean of the directions' losses), `forward_loss`, `backward_loss` (scalars),
        `mask` `(batch_size, num_tokens)`, and for continuous heads `forward_cosine`,
        `backward_cosine`: each position's cosine (0 if none).
        """
        target_ids = None
        if self._output_layer.requires_target_ids:
            if self._target_indexer not in tokens:
                raise ConfigurationError(
                    f"model.target_indexer is '{self._target_indexer}', but the tokens field only "
                    f"has {sorted(tokens)}"
                )
            tokens = dict(tokens)
            target_ids = next(iter(tokens.pop(self._target_indexer).values()))
        mask = util.get_text_field_mask(tokens)
        embeddings = self._text_field_embedder(tokens)
        contextual = self._dropout(self._contextualizer(embeddings, mask))
        forward_states, backward_states = contextual.chunk(2, dim=-1)
        target_embeddings = None
        if not self._output_layer.requires_target_ids:
            source = embeddings if self._target_embedder is None else self._target_embedder(tokens)
            target_embeddings = source.detach()

        # Pair (t, t+1) exists when both positions are real tokens.
        pair_mask = mask[:, :-1] & mask[:, 1:]
        output_dict: Dict[str, torch.Tensor] = {"mask": mask}
        losses = []
        for direction, states, predict_at, target_at in (
            ("forward", forward_states, slice(None, -1), slice(1, None)),
            ("backward", backward_states, slice(1, None), slice(None, -1)),
        ):
            if self._directions not in ("both", direction):
                continue
            targets = None if target_embeddings is None else target_embeddings[:, target_at][pair_mask]
            head_output = self.output_layer(direction)(
                states[:, predict_at][pair_mask],
                target_embeddings=targets,
                target_ids=None if target_ids is None else target_ids[:, target_at][pair_mask],
            )
            token_loss = head_output["loss"]
            direction_loss = token_loss.sum() / max(token_loss.numel(), 1)
            losses.append(direction_loss)
            output_dict[f"{direction}_loss"] = direction_loss
            metric = self._forward_loss if direction == "forward" else self._backward_loss
            metric(direction_loss)
            if "predictions" in head_output:
                self._update_vector_metrics(
                    direction, head_output["predictions"], targets, pair_mask, predict_at, output_dict
                )
        output_dict["loss"] = sum(losses[1:], losses[0]) / len(losses)
        return output_dict

    def contextual_layers(self, tokens: TextFieldTensors) -> Tuple[torch.Tensor, torch.BoolTensor]:
        """
        Every layer of the contextualizer, as downstream features (call `eval()` for no dropout).

        # Parameters

        tokens : `TextFieldTensors`
            As for `forward`, with the boundary tokens.

        # Returns

        `(layers, mask)`: `(num_layers + 1, batch_size, num_tokens, 2 * P)`, layer 0 the input twice.
        """
        if not returns_all_layers(self._contextualizer):
            raise ConfigurationError(
                f"model.contextualizer ({type(self._contextualizer).__name__}) has no forward_all_layers"
            )
        if self._output_layer.requires_target_ids and self._target_indexer in tokens:
            tokens = {key: value for key, value in tokens.items() if key != self._target_indexer}
        mask = util.get_text_field_mask(tokens)
        embeddings = self._text_field_embedder(tokens)
        return self._contextualizer.forward_all_layers(embeddings, mask), mask

    def target_vectors(self, tokens: TextFieldTensors) -> Tuple[torch.Tensor, torch.BoolTensor]:
        """
        The vectors a continuous output layer is trained to predict, one per token.

        # Parameters

        tokens : `TextFieldTensors`
            As for `forward`.

        # Returns

        `(targets, mask)`: detached `(batch_size, num_tokens, embedding_dim)` targets and their mask.
        """
        if self._output_layer.requires_target_ids:
            head = type(self._output_layer).__name__
            raise ConfigurationError(f"model.output_layer {head} predicts word ids, not target vectors")
        embedder = self._target_embedder or self._text_field_embedder
        return embedder(tokens).detach(), util.get_text_field_mask(tokens)

    def _update_vector_metrics(
        self,
        direction: str,
        predictions: torch.Tensor,
        targets: torch.Tensor,
        pair_mask: torch.BoolTensor,
        predict_at: slice,
        output_dict: Dict[str, torch.Tensor],
    ) -> None:
        with torch.no_grad():
            cosine = F.cosine_similarity(predictions, targets, dim=-1, eps=1e-8)
            # cosine's dtype (float32 under autocast); the slice-view scatter needs no host sync.
            per_position = cosine.new_zeros(pair_mask.size(0), pair_mask.size(1) + 1)
            per_position[:, predict_at].masked_scatter_(pair_mask, cosine)
            output_dict[f"{direction}_cosine"] = per_position
            if cosine.numel() == 0:
                return
            self._cosine_similarity(cosine.mean())
            self._retrieval_accuracy(self._retrieval_accuracy_of(predictions, targets))
            self._constant_baselines[direction](targets)

    def _retrieval_accuracy_of(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The fraction of predictions nearest to their own target of the batch (compared by value)."""
        gold = targets
        if self.training and predictions.size(0) > self._retrieval_sample_size:
            chosen = torch.randperm(predictions.size(0), device=predictions.device)
            chosen = chosen[: self._retrieval_sample_size]
            predictions, gold = predictions[chosen], targets[chosen]
        # Training never deduplicates: `torch.unique` waits for the device (a host sync per step).
        return retrieval_accuracy(predictions, gold, targets, deduplicate=not self.training)

    def get_metrics(self, reset: bool = False) -> Dict[str, float]:
        if self.training and not reset:
            # Asked after every training step: reading the device sums there would sync.
            return {}
        metrics = {}
        if self._directions in ("both", "forward"):
            metrics["forward_loss"] = self._forward_loss.get_metric(reset)
        if self._directions in ("both", "backward"):
            metrics["backward_loss"] = self._backward_loss.get_metric(reset)
        if not self._output_layer.requires_target_ids:
            metrics["cosine_similarity"] = self._cosine_similarity.get_metric(reset)
            metrics["retrieval_accuracy"] = self._retrieval_accuracy.get_metric(reset)
            baselines = []
            for direction in ("forward", "backward"):
                if self._directions in ("both", direction):
                    baseline = self._constant_baselines[direction].get_metric(reset)
                    metrics[f"{direction}_constant_baseline_loss"] = baseline
                    baselines.append(baseline)
            metrics["constant_baseline_loss"] = sum(baselines) / len(baselines)
        return metrics

    def make_output_human_readable(self, output_dict: Dict[str, torch.Tensor]) -> Dict[str, Any]:
        lengths = output_dict["mask"].sum(-1).tolist()
        for key in ("forward_cosine", "backward_cosine"):
            if key in output_dict:
                values: List[List[float]] = output_dict[key].tolist()
                output_dict[key] = [row[:length] for row, length in zip(values, lengths)]
        return output_dict
