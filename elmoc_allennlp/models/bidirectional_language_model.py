from typing import Any, Dict, List, Optional, Tuple

import torch

from allennlp.common.checks import ConfigurationError, check_dimensions_match
from allennlp.data import TextFieldTensors, Vocabulary
from allennlp.models.model import Model
from allennlp.modules import Seq2SeqEncoder, TextFieldEmbedder
from allennlp.nn import InitializerApplicator, util

from elmoc_allennlp.common.checks import check_one_of
from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.fasttext.health import check_target_vectors
from elmoc_allennlp.models.bilm_directions import BilmDirections
from elmoc_allennlp.models.bilm_metrics import BilmMetrics
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import returns_all_layers


@Model.register("elmoc_bilm")
class BidirectionalLanguageModel(BilmDirections, BilmMetrics, Model):
    """
    An ELMo-style bidirectional language model: a forward and a backward LM on the contextualizer's
    `[forward; backward]` output. ELMo-C uses fastText, `elmoc_lstm` and `elmoc_continuous`
    ([Li et al., 2019](https://arxiv.org/abs/1902.11269)).

    `loss` is the mean of the directions' mean per-token losses (as bilm-tf's and allennlp-models'
    `language_model`). Metrics: `forward_loss`, `backward_loss`, and for continuous heads
    `cosine_similarity`, `retrieval_accuracy` and `constant_baseline_loss` (docs/pretraining.md, which
    also says why degenerate fastText targets are a `DegenerateVectorsError`).

    Registered as a `Model` with name "elmoc_bilm".

    # Parameters

    vocab : `Vocabulary`
        The vocabulary built from the corpus (given by allennlp); its `target_indexer` namespace is
        the closed vocabulary of softmax-family heads. Continuous heads need none.
    text_field_embedder : `TextFieldEmbedder`
        Embeds the `tokens` field (fastText vectors in ELMo-C).
    contextualizer : `Seq2SeqEncoder`
        A bidirectional encoder, each half of its output of dimension
        `output_layer.get_input_dim()`.
    output_layer : `LanguageModelOutputLayer`
        The forward LM's head, shared with the backward LM unless `backward_output_layer` is given.
    target_embedder : `TextFieldEmbedder`, optional (default = `None`)
        Embeds the target words for continuous heads; by default the (frozen) input embeddings.
    target_indexer : `str`, optional (default = `"targets"`)
        For softmax-family heads: the `tokens` indexer that gives the target ids (not embedded).
    dropout : `float`, optional (default = `0.0`)
        Dropout on the contextualizer's output (authors: `output_layer.dropout` 0.0).
    retrieval_sample_size : `int`, optional (default = `512`)
        Predictions per training batch scored for `retrieval_accuracy` (all of them in evaluation).
    initializer : `InitializerApplicator`, optional (default = `None`)
        Initializes the parameters after they are built (allennlp's); `None` keeps each module's own
        initialization.
    directions : `str`, optional (default = `"both"`)
        `"forward"` or `"backward"` trains only that LM, for `elmoc-merge-bilm` (Li et al. 2019,
        footnote 7), with a contextualizer that has `forward_layers` and `backward_layers` (as
        `elmoc_lstm`).
    backward_output_layer : `LanguageModelOutputLayer`, optional (default = `None`)
        A separate head for the backward LM, as the authors' two independent LMs have.
    tie_output_embedding : `str`, optional (default = `None`)
        The key of a `text_field_embedder` `Embedding` tied as the output layer's (ELMo-Sub;
        `elmoc_softmax`).
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
        continuous = not output_layer.requires_target_ids
        self._init_metrics(
            output_layer.get_output_dim() if continuous else None, retrieval_sample_size
        )
        if continuous:
            self._check_target_vectors()
        if initializer is not None:
            initializer(self)
        if tie_output_embedding is not None:
            self._tie_output_embedding(tie_output_embedding)
        if directions != "both":
            self._freeze_other_direction()

    @property
    def contextualizer(self) -> Seq2SeqEncoder:
        return self._contextualizer

    @property
    def text_field_embedder(self) -> TextFieldEmbedder:
        return self._text_field_embedder

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

    def forward(self, tokens: TextFieldTensors) -> Dict[str, torch.Tensor]:  # type: ignore
        """
        `tokens`: sentences with their boundary tokens. Returns `loss`, `forward_loss`, `backward_loss`
        (scalars), `mask` `(batch_size, num_tokens)`, and for continuous heads `forward_cosine`,
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
            if not self.trains(direction):
                continue
            targets = (
                None if target_embeddings is None else target_embeddings[:, target_at][pair_mask]
            )
            head_output = self.output_layer(direction)(
                states[:, predict_at][pair_mask],
                target_embeddings=targets,
                target_ids=None if target_ids is None else target_ids[:, target_at][pair_mask],
            )
            token_loss = head_output["loss"]
            direction_loss = token_loss.sum() / max(token_loss.numel(), 1)
            losses.append(direction_loss)
            output_dict[f"{direction}_loss"] = direction_loss
            self._losses[direction](direction_loss)
            if "predictions" in head_output:
                self._update_vector_metrics(
                    direction,
                    head_output["predictions"],
                    targets,
                    pair_mask,
                    predict_at,
                    output_dict,
                )
        output_dict["loss"] = sum(losses[1:], losses[0]) / len(losses)
        return output_dict

    def contextual_layers(self, tokens: TextFieldTensors) -> Tuple[torch.Tensor, torch.BoolTensor]:
        """
        Every layer of the contextualizer for `tokens` (as for `forward`), as downstream features
        (call `eval()` for no dropout): `(layers, mask)`, the layers `(num_layers + 1, batch_size,
        num_tokens, 2 * P)`, layer 0 the input twice.
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
        The vectors a continuous output layer is trained to predict for `tokens` (as for `forward`):
        `(targets, mask)`, detached targets `(batch_size, num_tokens, embedding_dim)`.
        """
        if self._output_layer.requires_target_ids:
            head = type(self._output_layer).__name__
            raise ConfigurationError(
                f"model.output_layer {head} predicts word ids, not target vectors"
            )
        embedder = self._target_embedder or self._text_field_embedder
        return embedder(tokens).detach(), util.get_text_field_mask(tokens)

    def make_output_human_readable(self, output_dict: Dict[str, torch.Tensor]) -> Dict[str, Any]:
        lengths = output_dict["mask"].sum(-1).tolist()
        for key in ("forward_cosine", "backward_cosine"):
            if key in output_dict:
                values: List[List[float]] = output_dict[key].tolist()
                output_dict[key] = [row[:length] for row, length in zip(values, lengths)]
        return output_dict
