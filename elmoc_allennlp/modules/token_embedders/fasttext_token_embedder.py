import json
import logging
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError
from allennlp.modules.token_embedders.token_embedder import TokenEmbedder

from elmoc_allennlp.common.fasttext_vectors import FastTextVectors, no_vector_id
from elmoc_allennlp.common.portable_bilm import locate_fasttext

logger = logging.getLogger(__name__)

# The state-dict entry (a uint8 tensor of UTF-8 JSON) recording which vectors a model used.
VECTORS_RECORD_KEY = "vectors_record"


@TokenEmbedder.register("elmoc_fasttext")
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

    What the model was trained with is recorded instead: its `state_dict` (so every checkpoint
    and `model.tar.gz`) holds `vectors_record`, the path and the `FastTextVectors.fingerprint`
    (size and a hash of the header, dictionary and sampled blocks) of the `.bin`. Loading
    weights whose record names other vectors than `vectors_path` holds (another model of the
    same dimension, or an unrelated file of the same name next to a moved archive) raises a
    `ConfigurationError` naming both files, unless `allow_different_vectors`. Weights saved
    before the record existed load without the check. Before every lookup the embedder also
    checks that the file was not replaced or rewritten since it was opened
    (`FastTextVectors.check_unchanged`), and the rows it reads are checked for NaN and inf.

    On a GPU the lookup above costs host-device synchronisations (the id range check and the
    copy of the ids to the CPU). With `gather_vectors` on the `elmoc_fasttext_subwords` indexer,
    the vectors are looked up where the batch is made and arrive as `vectors`; a frozen embedder
    then only masks them, on their device, with no synchronisation (a trainable one ignores them
    and looks up its own table).

    Registered as a `TokenEmbedder` with name "elmoc_fasttext".

    # Parameters

    vectors_path : `str`
        The fastText `.bin` model; the same one as the `elmoc_fasttext_subwords` indexer's.
    trainable : `bool`, optional (default=`False`)
        If `True`, the whole table is copied into a `torch.nn.Parameter` (it is then saved with
        the model and lives on the model's device). That costs `(num_words + bucket) * dim * 4`
        bytes, for the parameter and again for its gradient and optimizer state (about 2.4 GB for
        each with fastText's default 2M buckets and 300 dimensions): only for small models.
    allow_different_vectors : `bool`, optional (default=`False`)
        Load weights trained with other fastText vectors than `vectors_path` (their recorded
        fingerprint differs) with a warning instead of an error. Only for deliberate swaps, e.g.
        `-o '{"model.text_field_embedder.token_embedders.fasttext.allow_different_vectors":
        true}'`: representations computed from other vectors than the training ones are
        meaningless.
    embedding_dim : `int`, optional (default=`None`)
        The dimension the config was sized for (`ELMOC_FASTTEXT_DIM` in
        `training_configs/downstream`): a `.bin` of another dimension is a `ConfigurationError`
        naming both, instead of a size mismatch deep in the model.
    serialization_dir : `str`, optional (default=`None`)
        Given by allennlp: loading an archive, a `vectors_path` that does not exist is looked
        for next to the archive, then in `ELMOC_VECTORS_PATH` (see
        `elmoc_allennlp/common/portable_bilm.py`).
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
        # In a loaded archive a missing file is looked for next to it (common/portable_bilm.py).
        vectors_path = locate_fasttext(vectors_path, serialization_dir)
        self._vectors = FastTextVectors.from_path(vectors_path)
        if embedding_dim is not None and embedding_dim != self._vectors.dim:
            raise ConfigurationError(
                f"elmoc_fasttext.embedding_dim (ELMOC_FASTTEXT_DIM in the training_configs/"
                f"downstream configs) is {embedding_dim}, but the fastText model {vectors_path} "
                f"has {self._vectors.dim} dimensions: set ELMOC_FASTTEXT_DIM={self._vectors.dim}"
            )
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

    # ------------------------------------------------------------------ which vectors

    def vectors_record(self) -> Dict[str, Any]:
        """The path and fingerprint of the vectors, as recorded in the `state_dict`."""
        path = str(self._vectors.path.absolute())
        return {"path": path, "fingerprint": self._vectors.fingerprint}

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        encoded = json.dumps(self.vectors_record(), sort_keys=True).encode("utf-8")
        destination[prefix + VECTORS_RECORD_KEY] = torch.tensor(list(encoded), dtype=torch.uint8)

    def _load_from_state_dict(
        self,
        state_dict: Dict[str, Any],
        prefix: str,
        local_metadata,
        strict: bool,
        missing_keys: List[str],
        unexpected_keys: List[str],
        error_msgs: List[str],
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
            raise ConfigurationError(
                f"The weights being loaded have a corrupt {VECTORS_RECORD_KEY} ({error})"
            ) from None
        current = self._vectors.fingerprint
        if self._vectors.matches_fingerprint(saved_fingerprint):
            return
        message = (
            f"These weights were trained with the fastText model {saved_path} (fingerprint "
            f"{saved_fingerprint}), but vectors_path is {self._vectors.path} (fingerprint "
            f"{current}): a different file, so the representations would be meaningless. Use "
            "the .bin the model was trained with"
        )
        if self.allow_different_vectors:
            logger.warning("%s; going on because allow_different_vectors is set.", message)
            return
        raise ConfigurationError(
            f"{message}, or set allow_different_vectors (of the 'fasttext' token embedder, "
            "or of ElmocEmbedder / the elmoc_token_embedder / `allennlp elmoc-embed "
            "--allow-different-vectors`) if the swap is deliberate."
        )

    def forward(
        self,
        subword_ids: torch.LongTensor,
        mask: torch.BoolTensor = None,
        vectors: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """
        # Parameters

        subword_ids : `torch.LongTensor`
            Shape `(batch_size, num_tokens, num_subwords)` (any number of leading dimensions),
            from `FastTextSubwordIndexer`: input-matrix row + 1, 0 for padding.
        mask : `torch.BoolTensor`, optional
            Shape `(batch_size, num_tokens)`; masked positions are set to zeros.
        vectors : `torch.Tensor`, optional
            Shape `(batch_size, num_tokens, dim)`: the tokens' vectors, looked up by the indexer
            (`gather_vectors`). Used as they are by a frozen embedder.

        # Returns

        `torch.Tensor`, shape `(batch_size, num_tokens, dim)`.
        """
        if vectors is not None and self.weight is None:
            if vectors.size(-1) != self._vectors.dim or vectors.shape[:-1] != subword_ids.shape[:-1]:
                raise ConfigurationError(
                    f"The indexer's vectors have shape {tuple(vectors.shape)}, but fastText model "
                    f"{self._vectors.path} has {self._vectors.dim} dimensions and the subword ids "
                    f"have shape {tuple(subword_ids.shape)}: the indexer and the embedder must "
                    "use the same .bin"
                )
            embedded = vectors.to(torch.float32)
            if mask is not None:
                embedded = embedded * mask.unsqueeze(-1)
            return embedded
        self._vectors.check_unchanged()
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
