from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from allennlp.modules.token_embedders.token_embedder import TokenEmbedder

from elmoc_allennlp.common.fasttext_vectors import FastTextVectors, no_vector_id
from elmoc_allennlp.common.registry_aliases import register_old_name


@TokenEmbedder.register("elmoc_fasttext")
@register_old_name(TokenEmbedder, "fasttext")
class FastTextTokenEmbedder(TokenEmbedder):
    """
    Embeds the output of the `elmoc_fasttext_subwords` indexer as fastText does: each token's vector
    is the mean of its input-matrix rows (its own row and its character n-gram rows). Padding,
    and tokens indexed as having no vector, embed to zeros.

    By default the vectors are frozen and the table stays where `FastTextVectors` put it: a
    memory map on the CPU. It is *not* a parameter or buffer, so it is never in the
    `state_dict`, never saved in checkpoints and never moved by `.to(device)`; the lookup runs on
    the CPU and only the `(batch_size, num_tokens, dim)` result is moved to the device of
    `subword_ids`. A saved model therefore needs `vectors_path` to exist when it is loaded.

    Registered as a `TokenEmbedder` with name "elmoc_fasttext"
    ("fasttext" in older configs).

    # Parameters

    vectors_path : `str`
        The fastText `.bin` model; the same one as the `elmoc_fasttext_subwords` indexer's.
    trainable : `bool`, optional (default=`False`)
        If `True`, the whole table is copied into a `torch.nn.Parameter` (it is then saved with
        the model and lives on the model's device). That costs `(num_words + bucket) * dim * 4`
        bytes, for the parameter and again for its gradient and optimizer state (about 2.4 GB for
        each with fastText's default 2M buckets and 300 dimensions): only for small models.
    """

    def __init__(self, vectors_path: str, trainable: bool = False) -> None:
        super().__init__()
        self._vectors = FastTextVectors.from_path(vectors_path)
        self._num_rows = self._vectors.num_rows
        self._no_vector_id = no_vector_id(self._vectors)
        self.weight: Optional[torch.nn.Parameter]
        if trainable:
            rows = self._vectors.rows(torch.arange(self._num_rows))
            self.weight = torch.nn.Parameter(rows, requires_grad=True)
        else:
            self.weight = None

    @property
    def vectors(self) -> FastTextVectors:
        return self._vectors

    def get_output_dim(self) -> int:
        return self._vectors.dim

    def forward(self, subword_ids: torch.LongTensor, mask: torch.BoolTensor = None) -> torch.Tensor:
        """
        # Parameters

        subword_ids : `torch.LongTensor`
            Shape `(batch_size, num_tokens, num_subwords)` (any number of leading dimensions),
            from `FastTextSubwordIndexer`: input-matrix row + 1, 0 for padding.
        mask : `torch.BoolTensor`, optional
            Shape `(batch_size, num_tokens)`; masked positions are set to zeros.

        # Returns

        `torch.Tensor`, shape `(batch_size, num_tokens, dim)`.
        """
        if subword_ids.numel() > 0:
            low, high = int(subword_ids.min()), int(subword_ids.max())
            if low < 0 or high > self._no_vector_id:
                raise ValueError(
                    f"subword id {low if low < 0 else high} is out of range for fastText model "
                    f"{self._vectors.path} (expected 0 to {self._no_vector_id}); was the "
                    "indexer built from a different model?"
                )
        leading_shape = subword_ids.shape[:-1]
        # The frozen table is a CPU memory map: look up there, move only the result.
        device = torch.device("cpu") if self.weight is None else self.weight.device
        flat = subword_ids.to(device).reshape(-1, subword_ids.size(-1))
        valid = (flat > 0) & (flat <= self._num_rows)
        counts = valid.sum(-1, keepdim=True).clamp(min=1)
        weights = valid.to(torch.float32) / counts

        if self.weight is not None:
            # Invalid ids read row 0 with weight 0.
            rows = torch.where(valid, flat - 1, torch.zeros_like(flat))
            embedded = F.embedding_bag(
                rows, self.weight, mode="sum", per_sample_weights=weights.to(self.weight.dtype)
            )
        else:
            # Gather only the rows needed from the memory map, plus a zero row for the rest.
            # (numpy's unique is single-threaded: torch's stalls on a busy machine.)
            flat_array, valid_array = flat.numpy(), valid.numpy()
            needed, inverse = np.unique(flat_array[valid_array] - 1, return_inverse=True)
            table = torch.empty(len(needed) + 1, self._vectors.dim)
            self._vectors.rows(needed, out=table[:-1])
            table[-1] = 0.0
            local = np.full(flat_array.shape, len(needed), dtype=np.int64)
            local[valid_array] = inverse.reshape(-1)
            embedded = F.embedding_bag(
                torch.from_numpy(local), table, mode="sum", per_sample_weights=weights
            )

        embedded = embedded.view(*leading_shape, -1)
        if mask is not None:
            embedded = embedded * mask.to(embedded.device).unsqueeze(-1)
        return embedded.to(subword_ids.device)
