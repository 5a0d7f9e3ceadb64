import logging
from typing import Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmoc_allennlp.common.checks import check_positive
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.output_layers.softmax import closed_vocabulary_size

logger = logging.getLogger(__name__)

# Rows of the full-softmax logits computed at once in evaluation mode (a row is `num_words` wide).
_EVAL_LOGITS_PER_CHUNK = 2 ** 25


class LogUniformSampler:
    """
    Draws distinct negative classes from a log-uniform (Zipfian) distribution over a
    frequency-sorted vocabulary, as TensorFlow's `log_uniform_candidate_sampler` with
    `unique=True`, which ELMo used and allennlp's `SampledSoftmaxLoss` reimplements:
    class `k` of `range_max` is drawn with probability

        P(k) = (log(k + 2) - log(k + 1)) / log(range_max + 1)

    and draws are repeated until `num_samples` distinct classes have been seen. The expected
    count of class `k` in those `num_tries` draws, `1 - (1 - P(k))^num_tries`, is what the
    sampled softmax subtracts (in log space) from the logits: the "log-Q" correction.

    Unlike allennlp's `_choice`, which tests one draw at a time in Python, this draws in blocks
    and finds the first occurrences with numpy; the result has the same distribution (the
    first `num_samples` distinct values of an i.i.d. stream, and the position of the last of
    them as `num_tries`).

    # Parameters

    range_max : `int`
        The number of classes.
    num_samples : `int`
        How many distinct classes to draw (at most `range_max`).
    """

    def __init__(self, range_max: int, num_samples: int) -> None:
        if not 0 < num_samples <= range_max:
            raise ConfigurationError(
                f"output_layer.num_samples must be in [1, {range_max}] (the number of candidate "
                f"words), got {num_samples}"
            )
        self.range_max = range_max
        self.num_samples = num_samples
        self._log_range = np.log(range_max + 1)

    def probabilities(self, classes: torch.Tensor) -> torch.Tensor:
        classes = classes.to(torch.float64)
        return torch.log((classes + 2.0) / (classes + 1.0)) / self._log_range

    def expected_count(self, classes: torch.Tensor, num_tries: int) -> torch.Tensor:
        """`1 - (1 - P(k))^num_tries` for each class `k`, as `float32`."""
        probabilities = self.probabilities(classes)
        return (-torch.expm1(num_tries * torch.log1p(-probabilities))).to(torch.float32)

    def draw(self, generator: Optional[np.random.Generator] = None) -> Tuple[np.ndarray, int]:
        """
        Returns `(classes, num_tries)`: `num_samples` distinct classes in order of first
        appearance, and the number of draws it took.
        """
        random = generator if generator is not None else np.random
        stream = np.empty(0, dtype=np.int64)
        block = max(2 * self.num_samples, 1024)
        while True:
            uniforms = random.random(block) if generator is not None else random.rand(block)
            draws = (np.exp(uniforms * self._log_range) - 1.0).astype(np.int64)
            stream = np.concatenate([stream, np.clip(draws, 0, self.range_max - 1)])
            _, first_positions = np.unique(stream, return_index=True)
            if len(first_positions) >= self.num_samples:
                first_positions.sort()
                first_positions = first_positions[: self.num_samples]
                return stream[first_positions], int(first_positions[-1]) + 1
            block *= 2


@LanguageModelOutputLayer.register("elmoc_sampled_softmax")
class SampledSoftmaxOutputLayer(LanguageModelOutputLayer):
    """
    The sampled softmax of ELMo (Jean et al., 2015, as in TensorFlow's `sampled_softmax_loss`):
    in training, each target is scored against itself and `num_samples` negative words shared by
    the whole batch, drawn by a `LogUniformSampler` over the frequency-sorted vocabulary, with

    - the log-Q correction: every logit minus the log of its word's expected count in the sample;
    - accidental-hit removal: a negative that is the target itself is masked out.

    In evaluation mode the loss is the full softmax's (exact) negative log-likelihood. The
    vocabulary must be sorted by decreasing frequency, which allennlp's `from_instances`
    vocabulary is; the namespace's padding index is never drawn.

    Two baselines of Li et al. (2019) are configurations of this head:

    - "Sampled" (ELMo's output layer): a trainable `num_words x input_dim` output embedding and
      bias, 8192 samples;
    - "Fixed" (section 5.2): the output embedding is the frozen fastText vector of each vocabulary
      word (`pretrained_file`, `trainable_embedding: false`); the hidden state is projected to the
      fastText dimension, so it has about the parameters of the continuous head (plus the bias),
      but keeps the softmax loss.

    Registered as a `LanguageModelOutputLayer` with name "elmoc_sampled_softmax".

    # Parameters

    vocab : `Vocabulary`
    input_dim : `int`
        Dimension of the hidden states.
    num_samples : `int`, optional (default = `8192`)
        Distinct negative words per batch (ELMo's setting).
    vocab_namespace : `str`, optional (default = `"targets"`)
        The namespace of the target ids.
    embedding_dim : `int`, optional (default = `input_dim`, or the fastText dimension with
        `pretrained_file`)
        Dimension of the output embedding; the hidden state is projected to it if it differs
        from `input_dim`.
    pretrained_file : `str`, optional
        A fastText `.bin`: the output embedding starts as the fastText vector of each vocabulary
        word (fastText's `</s>` for `<S>` and `</S>`, as the `elmoc_fasttext_subwords` indexer does;
        zeros for padding). The table is rebuilt from this file whenever the model is built, so
        it is not saved with the weights.
    trainable_embedding : `bool`, optional (default = `True`)
        `False` freezes the output embedding (a buffer, not a parameter); the bias stays
        trainable.
    sparse : `bool`, optional (default = `False`)
        Sparse gradients for the output embedding and bias (only the sampled and target rows):
        use with the `dense_sparse_adam` optimizer. ELMo's TensorFlow training updated these
        rows sparsely.
    """

    requires_target_ids = True

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
        super().__init__()
        num_words = closed_vocabulary_size(vocab, vocab_namespace, "output_layer.vocab_namespace")
        pretrained: Optional[torch.Tensor] = None
        if pretrained_file is not None:
            pretrained = fasttext_output_embedding(vocab, vocab_namespace, pretrained_file)
            if embedding_dim is not None and embedding_dim != pretrained.size(1):
                raise ConfigurationError(
                    f"output_layer.embedding_dim is {embedding_dim} but the vectors of "
                    f"output_layer.pretrained_file have dimension {pretrained.size(1)}"
                )
            embedding_dim = pretrained.size(1)
        embedding_dim = embedding_dim or input_dim
        check_positive(input_dim, "output_layer.input_dim")
        check_positive(embedding_dim, "output_layer.embedding_dim")
        # Candidates are the ids 1 .. num_words - 1: index 0 is the namespace's padding.
        self._padding_offset = 1 if vocab.is_padded(vocab_namespace) else 0
        self.sampler = LogUniformSampler(num_words - self._padding_offset, num_samples)
        self._input_dim = input_dim
        self._embedding_dim = embedding_dim
        self._num_words = num_words
        self._sparse = sparse
        self.projection: Optional[torch.nn.Linear] = (
            torch.nn.Linear(input_dim, embedding_dim) if embedding_dim != input_dim else None
        )
        if pretrained is None:
            # Glorot-style init, as allennlp's SampledSoftmaxLoss.
            weight = torch.randn(num_words, embedding_dim) / embedding_dim ** 0.5
        else:
            weight = pretrained
        self.weight: torch.Tensor
        if trainable_embedding:
            self.weight = torch.nn.Parameter(weight)
        else:
            # A table read from `pretrained_file` is rebuilt at construction: don't save it.
            self.register_buffer("weight", weight, persistent=pretrained is None)
        # Shape (num_words, 1): an embedding table, so that its gradient can be sparse.
        self.bias = torch.nn.Parameter(torch.zeros(num_words, 1))

    def get_input_dim(self) -> int:
        return self._input_dim

    @property
    def num_words(self) -> int:
        return self._num_words

    def _project(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states if self.projection is None else self.projection(hidden_states)

    def forward(
        self,
        hidden_states: torch.Tensor,
        target_embeddings: Optional[torch.Tensor] = None,
        target_ids: Optional[torch.LongTensor] = None,
    ) -> Dict[str, torch.Tensor]:
        if target_ids is None:
            raise ValueError("SampledSoftmaxOutputLayer needs target_ids")
        hidden_states = self._project(hidden_states)
        if hidden_states.size(0) == 0:
            return {"loss": hidden_states.new_zeros(0)}
        if self.training:
            loss = self._sampled_loss(hidden_states, target_ids)
        else:
            loss = self._full_loss(hidden_states, target_ids)
        return {"loss": loss}

    def sample(self, device: torch.device) -> Tuple[torch.LongTensor, int]:
        """Draws the negatives of one batch: `(vocabulary ids, num_tries)`."""
        classes, num_tries = self.sampler.draw()
        return torch.from_numpy(classes + self._padding_offset).to(device), num_tries

    def _sampled_loss(
        self, hidden_states: torch.Tensor, target_ids: torch.LongTensor
    ) -> torch.Tensor:
        sampled_ids, num_tries = self.sample(hidden_states.device)
        sampler = self.sampler
        target_log_q = sampler.expected_count(target_ids - self._padding_offset, num_tries).log()
        sampled_log_q = sampler.expected_count(sampled_ids - self._padding_offset, num_tries).log()

        all_ids = torch.cat([target_ids, sampled_ids])
        all_weights = F.embedding(
            all_ids, self.weight, sparse=self._sparse and self.weight.requires_grad
        )
        all_biases = F.embedding(all_ids, self.bias, sparse=self._sparse).squeeze(1)
        num_targets = target_ids.size(0)
        target_weights, sampled_weights = all_weights[:num_targets], all_weights[num_targets:]
        target_biases, sampled_biases = all_biases[:num_targets], all_biases[num_targets:]

        target_logits = (hidden_states * target_weights).sum(-1) + target_biases
        target_logits = target_logits - target_log_q.to(hidden_states.dtype)
        sampled_logits = hidden_states @ sampled_weights.t() + sampled_biases
        sampled_logits = sampled_logits - sampled_log_q.to(hidden_states.dtype)
        # Accidental hits: a negative that is the target itself.
        accidental_hits = sampled_ids.unsqueeze(0) == target_ids.unsqueeze(1)
        sampled_logits = sampled_logits.masked_fill(accidental_hits, float("-inf"))
        logits = torch.cat([target_logits.unsqueeze(1), sampled_logits], dim=1)
        return -F.log_softmax(logits, dim=-1)[:, 0]

    def _full_loss(self, hidden_states: torch.Tensor, target_ids: torch.LongTensor) -> torch.Tensor:
        chunk = max(1, _EVAL_LOGITS_PER_CHUNK // self._num_words)
        losses = []
        for start in range(0, hidden_states.size(0), chunk):
            logits = F.linear(hidden_states[start : start + chunk], self.weight, self.bias[:, 0])
            losses.append(
                F.cross_entropy(logits, target_ids[start : start + chunk], reduction="none")
            )
        return torch.cat(losses)


def fasttext_output_embedding(
    vocab: Vocabulary, vocab_namespace: str, vectors_path: str
) -> torch.Tensor:
    """
    The fastText vector of every word of `vocab_namespace`, in id order, shape
    `(vocab_size, dim)`: what the "Fixed" baseline uses as its frozen output embedding. The
    reader's boundary tokens `<S>` and `</S>` get fastText's `</s>` vector (as the
    `elmoc_fasttext_subwords` indexer gives them); the padding token gets zeros.
    """
    from elmoc_allennlp.common.fasttext_vectors import FastTextVectors

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
    logger.info(
        "Built a %d x %d fastText output embedding for namespace '%s' from %s",
        table.size(0),
        table.size(1),
        vocab_namespace,
        vectors_path,
    )
    return table
