import logging
from typing import Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError, check_dimensions_match
from allennlp.data import Vocabulary

from elmoc_allennlp.common.precision import at_least_float32
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.output_layers.softmax import SoftmaxOutputLayer

logger = logging.getLogger(__name__)


class LogUniformSampler:
    """
    Draws `num_samples` distinct of `range_max` classes from P(k) = log((k + 2) / (k + 1)) / log(range_max + 1),
    as TensorFlow's `log_uniform_candidate_sampler` with `unique=True` (ELMo's), in numpy blocks.
    """

    def __init__(self, range_max: int, num_samples: int) -> None:
        if not 0 < num_samples <= range_max:
            raise ConfigurationError(
                f"output_layer.num_samples must be in [1, {range_max}], got {num_samples}"
            )
        self.range_max = range_max
        self.num_samples = num_samples
        self._log_range = np.log(range_max + 1)

    def probabilities(self, classes: torch.Tensor) -> torch.Tensor:
        classes = classes.to(torch.float64)
        return torch.log((classes + 2.0) / (classes + 1.0)) / self._log_range

    def expected_count(self, classes: torch.Tensor, num_tries: int) -> torch.Tensor:
        """`1 - (1 - P(k))^num_tries` for each class `k`, as `float32`: the log-Q correction."""
        probabilities = self.probabilities(classes)
        return (-torch.expm1(num_tries * torch.log1p(-probabilities))).to(torch.float32)

    def draw(self, generator: Optional[np.random.Generator] = None) -> Tuple[np.ndarray, int]:
        """`(classes, num_tries)`: the classes in order of first appearance, and the draws taken."""
        random = generator if generator is not None else np.random  # both have `random(size)`
        stream = np.empty(0, dtype=np.int64)
        block = max(2 * self.num_samples, 1024)
        while True:
            draws = (np.exp(random.random(block) * self._log_range) - 1.0).astype(np.int64)
            stream = np.concatenate([stream, np.clip(draws, 0, self.range_max - 1)])
            _, first_positions = np.unique(stream, return_index=True)
            if len(first_positions) >= self.num_samples:
                first_positions.sort()
                first_positions = first_positions[: self.num_samples]
                return stream[first_positions], int(first_positions[-1]) + 1
            block *= 2


@LanguageModelOutputLayer.register("elmoc_sampled_softmax")
class SampledSoftmaxOutputLayer(SoftmaxOutputLayer):
    """
    The sampled softmax of ELMo (Jean et al., 2015): in training each target is scored against
    `num_samples` negatives per batch from a `LogUniformSampler`, log-Q corrected, accidental hits masked;
    in evaluation, the full softmax. A frozen `pretrained_file` is the "Fixed" baseline of Li et al. (2019).

    Registered as a `LanguageModelOutputLayer` with name "elmoc_sampled_softmax".

    # Parameters

    vocab : `Vocabulary`
        The model's vocabulary; `vocab_namespace` in it gives the closed set of words scored.
    input_dim : `int`
        Dimension of the hidden states scored (the contextualizer's `projection_dim`).
    num_samples : `int`, optional (default = `8192`)
        Distinct negative words drawn per batch, shared by all its targets (ELMo's setting).
    vocab_namespace : `str`, optional (default = `"targets"`)
        The namespace of the target ids: that of the model's `target_indexer` (`"targets"` in the
        pretraining configs). It must be sorted by decreasing frequency, as allennlp's
        `from_instances` vocabulary is.
    embedding_dim : `int`, optional (default = `None`)
        Dimension of the output embedding; the hidden state is projected to it by a trained
        `Linear` if it differs from `input_dim`. `None` means the `pretrained_file`'s dimension
        when there is one (a different value is an error), else `input_dim`.
    pretrained_file : `str`, optional (default = `None`)
        A fastText `.bin` whose vectors initialize the output embedding, row by row in id order
        (`</s>`'s for the boundary tokens, zeros for padding). Frozen (`trainable_embedding`
        false), the embedding is rebuilt from the file when the model is loaded instead of being
        saved in its weights. `None`: a random initialization.
    trainable_embedding : `bool`, optional (default = `True`)
        `False` freezes the output embedding (a buffer); the bias stays trainable.
    sparse : `bool`, optional (default = `False`)
        Sparse gradients for the output embedding and bias, for the `dense_sparse_adam` optimizer.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        input_dim: int,
        num_samples: int = 8192,
        vocab_namespace: str = "targets",
        embedding_dim: Optional[int] = None,
        pretrained_file: Optional[str] = None,
        trainable_embedding: bool = True,
        sparse: bool = False,
    ) -> None:
        pretrained: Optional[torch.Tensor] = None
        if pretrained_file is not None:
            pretrained = fasttext_output_embedding(vocab, vocab_namespace, pretrained_file)
            if embedding_dim is not None:
                check_dimensions_match(
                    embedding_dim,
                    pretrained.size(1),
                    "output_layer.embedding_dim",
                    "pretrained_file dim",
                )
            embedding_dim = pretrained.size(1)
        super().__init__(vocab, input_dim, vocab_namespace, embedding_dim)
        # Candidates are the ids 1 .. num_words - 1: index 0 is the namespace's padding.
        self._padding_offset = 1 if vocab.is_padded(vocab_namespace) else 0
        self.sampler = LogUniformSampler(self.num_words - self._padding_offset, num_samples)
        self._sparse = sparse
        if pretrained is not None:
            self.weight = torch.nn.Parameter(pretrained)
        if not trainable_embedding:
            weight = self.weight.detach()
            del self.weight
            self.register_buffer("weight", weight, persistent=pretrained_file is None)
        # Shape (num_words, 1): an embedding table, so that its gradient can be sparse.
        self.bias = torch.nn.Parameter(torch.zeros(self.num_words, 1))

    def sample(self, device: torch.device) -> Tuple[torch.LongTensor, int]:
        """Draws the negatives of one batch: `(vocabulary ids, num_tries)`."""
        classes, num_tries = self.sampler.draw()
        return torch.from_numpy(classes + self._padding_offset).to(device), num_tries

    def target_loss(
        self, hidden_states: torch.Tensor, target_ids: torch.LongTensor
    ) -> torch.Tensor:
        if not self.training:
            return super().target_loss(hidden_states, target_ids)
        if self.projection is not None:
            hidden_states = self.projection(hidden_states)
        sampled_ids, num_tries = self.sample(hidden_states.device)
        all_ids = torch.cat([target_ids, sampled_ids])
        log_q = self.sampler.expected_count(all_ids - self._padding_offset, num_tries).log()
        all_weights = F.embedding(
            all_ids, self.weight, sparse=self._sparse and self.weight.requires_grad
        )
        all_biases = F.embedding(all_ids, self.bias, sparse=self._sparse).squeeze(1)
        all_biases = all_biases - log_q.to(hidden_states.dtype)
        num_targets = target_ids.size(0)
        target_weights, sampled_weights = all_weights[:num_targets], all_weights[num_targets:]
        target_biases, sampled_biases = all_biases[:num_targets], all_biases[num_targets:]

        target_logits = (hidden_states * target_weights).sum(-1) + target_biases
        # Under autocast the product runs in its low precision, the softmax in float32.
        sampled_logits = at_least_float32(hidden_states @ sampled_weights.t()) + sampled_biases
        # Accidental hits: a negative that is the target itself.
        accidental_hits = sampled_ids.unsqueeze(0) == target_ids.unsqueeze(1)
        sampled_logits = sampled_logits.masked_fill(accidental_hits, float("-inf"))
        logits = torch.cat([target_logits.unsqueeze(1), sampled_logits], dim=1)
        return -F.log_softmax(logits, dim=-1)[:, 0]


def fasttext_output_embedding(
    vocab: Vocabulary, vocab_namespace: str, vectors_path: str
) -> torch.Tensor:
    """The fastText vectors of `vocab_namespace` in id order: `</s>` for `<S>` and `</S>`, zeros for padding."""
    from elmoc_allennlp.fasttext.vectors import FastTextVectors

    vectors = FastTextVectors.from_path(vectors_path)
    tokens = vocab.get_index_to_token_vocabulary(vocab_namespace)
    table = torch.zeros(len(tokens), vectors.dim)
    has_eos = vectors.word_id(vectors.eos_word) >= 0
    padding = vocab._padding_token if vocab.is_padded(vocab_namespace) else None
    for index, token in tokens.items():
        if token == padding:
            continue
        if has_eos and token in ("<S>", "</S>"):
            token = vectors.eos_word
        table[index] = torch.from_numpy(vectors.word_vector(token))
    logger.info("Built a %s fastText output embedding from %s", tuple(table.shape), vectors_path)
    return table
