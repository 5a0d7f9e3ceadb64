import json
import logging
from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError
from allennlp.modules.token_embedders.token_embedder import TokenEmbedder

from elmoc_allennlp.fasttext.vectors import FastTextVectors, mean_subword_vectors, no_vector_id
from elmoc_allennlp.fasttext.location import locate_fasttext

logger = logging.getLogger(__name__)

# The state-dict entry (a uint8 tensor of UTF-8 JSON) recording which vectors a model used.
VECTORS_RECORD_KEY = "vectors_record"


@TokenEmbedder.register("elmoc_fasttext")
class FastTextTokenEmbedder(TokenEmbedder):
    """
    Embeds the output of the `elmoc_fasttext_subwords` indexer as fastText does: each token's vector
    is the mean of its input-matrix rows. Padding and tokens without a vector embed to zeros.

    Frozen (the default), the table stays a CPU memory map outside the `state_dict`, which
    records the `.bin`'s path and fingerprint instead (checked on loading).

    Registered as a `TokenEmbedder` with name "elmoc_fasttext".

    # Parameters

    vectors_path : `str`
        The fastText `.bin` model; the same one as the `elmoc_fasttext_subwords` indexer's.
    trainable : `bool`, optional (default=`False`)
        Copy the table into a `Parameter` (`(num_words + bucket) * dim * 4` bytes, plus gradient and
        optimizer state).
    allow_different_vectors : `bool`, optional (default=`False`)
        Load weights trained with other fastText vectors with a warning instead of an error.
    embedding_dim : `int`, optional (default=`None`)
        The dimension the config expects (`ELMOC_FASTTEXT_DIM`); another is a `ConfigurationError`.
    serialization_dir : `str`, optional (default=`None`)
        Given by allennlp when loading an archive: a missing `vectors_path` is looked for next to it.
    """

    def __init__(
        self,
        vectors_path: str,
        trainable: bool = False,
        allow_different_vectors: bool = False,
        embedding_dim: Optional[int] = None,
        serialization_dir: Optional[str] = None,
    ) -> None:
        super().__init__()
        self.allow_different_vectors = allow_different_vectors
        vectors_path = locate_fasttext(vectors_path, serialization_dir)
        self.vectors = FastTextVectors.from_path(vectors_path)
        if embedding_dim is not None and embedding_dim != self.vectors.dim:
            raise ConfigurationError(
                f"elmoc_fasttext.embedding_dim (ELMOC_FASTTEXT_DIM) is {embedding_dim}, but "
                f"{vectors_path} has {self.vectors.dim} dimensions"
            )
        self._no_vector_id = no_vector_id(self.vectors)
        self.weight = (
            torch.nn.Parameter(self.vectors.rows(torch.arange(self.vectors.num_rows)))
            if trainable
            else None
        )

    def get_output_dim(self) -> int:
        return self.vectors.dim

    def vectors_record(self) -> Dict[str, Any]:
        """The path and fingerprint of the vectors, as recorded in the `state_dict`."""
        return {"path": str(self.vectors.path.absolute()), "fingerprint": self.vectors.fingerprint}

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        encoded = json.dumps(self.vectors_record(), sort_keys=True).encode("utf-8")
        destination[prefix + VECTORS_RECORD_KEY] = torch.tensor(list(encoded), dtype=torch.uint8)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        key = prefix + VECTORS_RECORD_KEY
        record = state_dict.get(key)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if key in unexpected_keys:
            unexpected_keys.remove(key)
        if record is not None:
            self._check_record(record)

    def _check_record(self, record: torch.Tensor) -> None:
        try:
            saved = json.loads(bytes(record.cpu().to(torch.uint8).tolist()).decode("utf-8"))
            saved_path, saved_fingerprint = str(saved["path"]), str(saved["fingerprint"])
        except (ValueError, KeyError, TypeError) as error:
            raise ConfigurationError(f"corrupt {VECTORS_RECORD_KEY} ({error})") from None
        if saved_fingerprint == self.vectors.fingerprint:
            return
        message = (
            f"These weights were trained with {saved_path} (fingerprint {saved_fingerprint}), but "
            f"vectors_path is {self.vectors.path} ({self.vectors.fingerprint}), a different file"
        )
        if not self.allow_different_vectors:
            raise ConfigurationError(f"{message}; set allow_different_vectors if deliberate")
        logger.warning("%s; going on because allow_different_vectors is set.", message)

    def forward(
        self,
        subword_ids: torch.LongTensor,
        mask: torch.BoolTensor = None,
        vectors: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """
        `subword_ids` `(batch_size, num_tokens, num_subwords)` (any leading dimensions): input-matrix
        row + 1, 0 for padding; `mask` `(batch_size, num_tokens)` zeroes masked positions; `vectors`
        `(batch_size, num_tokens, dim)`: the indexer's `gather_vectors`, used as they are by a frozen
        embedder. Returns `(batch_size, num_tokens, dim)`.
        """
        if vectors is not None and self.weight is None:
            if vectors.size(-1) != self.vectors.dim or vectors.shape[:-1] != subword_ids.shape[:-1]:
                raise ConfigurationError(
                    f"The indexer's vectors have shape {tuple(vectors.shape)}, not that of "
                    f"{self.vectors.path}'s for subword ids {tuple(subword_ids.shape)}"
                )
            embedded = vectors.to(torch.float32)
        else:
            embedded = self._lookup(subword_ids)
        if mask is not None:
            embedded = embedded * mask.to(embedded.device).unsqueeze(-1)
        return embedded

    def _lookup(self, subword_ids: torch.LongTensor) -> torch.Tensor:
        self.vectors.check_unchanged()
        if subword_ids.numel() > 0:
            low, high = int(subword_ids.min()), int(subword_ids.max())
            if low < 0 or high > self._no_vector_id:
                raise ValueError(
                    f"subword id {low if low < 0 else high} is out of range for fastText model "
                    f"{self.vectors.path} (0 to {self._no_vector_id})"
                )
        if self.weight is None:
            # The frozen table is a CPU memory map: look up there, move only the result.
            return mean_subword_vectors(self.vectors, subword_ids).to(subword_ids.device)
        flat = subword_ids.to(self.weight.device).reshape(-1, subword_ids.size(-1))
        valid = (flat > 0) & (flat <= self.vectors.num_rows)
        weights = valid.to(self.weight.dtype) / valid.sum(-1, keepdim=True).clamp(min=1)
        # Invalid ids read row 0 with weight 0.
        rows = torch.where(valid, flat - 1, torch.zeros_like(flat))
        embedded = F.embedding_bag(rows, self.weight, mode="sum", per_sample_weights=weights)
        return embedded.view(*subword_ids.shape[:-1], -1).to(subword_ids.device)
