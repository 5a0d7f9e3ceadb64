from typing import List, Optional, Tuple

import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.modules.time_distributed import TimeDistributed
from allennlp.modules.token_embedders.token_embedder import TokenEmbedder

from elmoc_allennlp.common.checks import check_positive
from elmoc_allennlp.common.config_keys import naming_the_config_key
from elmoc_allennlp.modules.elmo_block_options import (
    check_boundary_tokens,
    reject_elmo_only_options,
)
from elmoc_allennlp.modules.elmoc import ElmocElmo


@TokenEmbedder.register("elmoc_token_embedder")
class ElmocTokenEmbedder(TokenEmbedder):
    """
    One ELMo representation from a trained ELMo-C biLM, in the role of allennlp's
    `elmo_token_embedder`: swap the two ELMo blocks of an allennlp-models config,

        "elmo": {"type": "elmo_characters"}
        "elmo": {"type": "elmo_token_embedder", "options_file": ..., "weight_file": ...}

    for

        "elmo": {"type": "elmoc_bilm_inputs", "archive_file": ...}
        "elmo": {"type": "elmoc_token_embedder", "archive_file": ...}

    and keep the rest (a `bidirectional_lm_token_embedder` block likewise: its type and
    `archive_file`): the output dimension is `2 * projection_dim` of the biLM, 1024 at the
    paper's size, as ELMo's.

    The biLM (frozen unless `requires_grad`) computes layer 0, each direction's projected fastText
    input (`[x_forward; x_backward]`), and layers 1..L, `[forward_j; backward_j]`; the output is
    `gamma * sum_j softmax(s)_j * h_j` (Peters et al. 2018, eq. 1), see `ElmocElmo`.

    Registered as a `TokenEmbedder` with name "elmoc_token_embedder".

    # Parameters

    archive_file : `str`
        The ELMo-C biLM `model.tar.gz` (the same as the `elmoc_bilm_inputs` indexer's).
    vectors_path : `str`, optional (default = `None`)
        The biLM's fastText `.bin`, if it is not where the archive says (see `ElmocArchive`).
    do_layer_norm : `bool`, optional (default = `False`)
        Layer-normalize each layer before mixing.
    dropout : `float`, optional (default = `0.5`)
        Dropout on the representation.
    requires_grad : `bool`, optional (default = `False`)
        If `True`, fine-tune the biLM.
    projection_dim : `int`, optional (default = `None`)
        If given, the representation is projected to this dimension by a trained linear layer.
    scalar_mix_parameters : `List[float]`, optional (default = `None`)
        Fixed pre-softmax mixing weights, one per layer (`num_layers + 1`), not trained: e.g.
        `[-9e10, -9e10, 1]` for the top layer of a 2-layer biLM.
    scalar_mix_l2_penalty : `float`, optional (default = `0.0`)
        `lambda` of the penalty `lambda * ||s||^2` on the trained pre-softmax mixing weights
        (ELMo paper, section 3.3); see `ElmocElmo`.
    allow_different_vectors : `bool`, optional (default = `False`)
        Accept a fastText `.bin` other than the one the biLM was trained with (see
        `ElmocBiLm`); by default that is a `ConfigurationError` naming both files.
    bilm_dim : `int`, optional (default = `None`)
        The size of the biLM's representations (`2 * projection_dim`) that the rest of the
        config was sized for; the configs in `training_configs/downstream` pass `ELMOC_DIM`. If
        given and the archive's biLM differs, a `ConfigurationError` names the key, the value
        given and the archive's, instead of a dimension mismatch deep in the downstream model.
    bos_eos_tokens : `Tuple[str, str]`, optional (default = `None`)
        Accepted from `bidirectional_lm_token_embedder` blocks: must be the boundary tokens the
        biLM was pretrained with (which ELMo-C adds itself), else a `ConfigurationError`.
    remove_bos_eos : `bool`, optional (default = `True`)
        As in `bidirectional_lm_token_embedder`: `False` keeps the representations of the
        sentence boundaries (`timesteps + 2` outputs).
    serialization_dir : `str`, optional (default = `None`)
        Given by allennlp, not by configs: the biLM's config travels in the downstream archive
        through it (see `elmoc_allennlp/common/portable_bilm.py`).
    """

    def __init__(
        self,
        archive_file: str,
        vectors_path: Optional[str] = None,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        requires_grad: bool = False,
        projection_dim: Optional[int] = None,
        scalar_mix_parameters: Optional[List[float]] = None,
        scalar_mix_l2_penalty: float = 0.0,
        allow_different_vectors: bool = False,
        bilm_dim: Optional[int] = None,
        bos_eos_tokens: Optional[Tuple[str, str]] = None,
        remove_bos_eos: bool = True,
        serialization_dir: Optional[str] = None,
    ) -> None:
        super().__init__()
        check_positive(projection_dim, "projection_dim", allow_none=True)
        self._elmo = ElmocElmo(
            archive_file,
            num_output_representations=1,
            requires_grad=requires_grad,
            do_layer_norm=do_layer_norm,
            dropout=dropout,
            keep_sentence_boundaries=not remove_bos_eos,
            scalar_mix_parameters=scalar_mix_parameters,
            scalar_mix_l2_penalty=scalar_mix_l2_penalty,
            vectors_path=vectors_path,
            allow_different_vectors=allow_different_vectors,
            serialization_dir=serialization_dir,
        )
        archive = self._elmo.bilm.archive
        check_boundary_tokens(
            bos_eos_tokens, archive.start_token, archive.end_token, str(archive_file)
        )
        if bilm_dim is not None and bilm_dim != self._elmo.get_output_dim():
            projection = self._elmo.get_output_dim() // 2
            raise ConfigurationError(
                f"elmoc_token_embedder.bilm_dim (ELMOC_DIM in the training_configs/downstream "
                f"configs) is {bilm_dim}, but the biLM archive {archive_file} gives "
                f"{self._elmo.get_output_dim()}-dimensional representations (2 x its "
                f"projection_dim {projection}): set ELMOC_DIM={self._elmo.get_output_dim()}"
            )
        if projection_dim:
            self._projection: Optional[torch.nn.Linear] = torch.nn.Linear(
                self._elmo.get_output_dim(), projection_dim
            )
            self.output_dim = projection_dim
        else:
            self._projection = None
            self.output_dim = self._elmo.get_output_dim()

    @classmethod
    def from_params(
        cls, params: Params, constructor_to_call=None, constructor_to_inspect=None, **extras
    ):
        # Options of the replaced ELMo block with no ELMo-C meaning: say what to change.
        reject_elmo_only_options(params)
        with naming_the_config_key(params):
            return super().from_params(
                params,
                constructor_to_call=constructor_to_call,
                constructor_to_inspect=constructor_to_inspect,
                **extras,
            )

    def get_output_dim(self) -> int:
        return self.output_dim

    @property
    def elmo(self) -> ElmocElmo:
        return self._elmo

    def forward(self, elmo_tokens: torch.Tensor = None, **unexpected) -> torch.Tensor:
        """
        # Parameters

        elmo_tokens : `torch.Tensor`
            Shape `(batch_size, timesteps, num_subwords)`: the output of the `elmoc_bilm_inputs`
            indexer.

        # Returns

        `torch.Tensor`
            Shape `(batch_size, timesteps, output_dim)`, zero at padding.
        """
        if elmo_tokens is None or unexpected:
            raise ConfigurationError(
                "The elmoc_token_embedder takes the output of an 'elmoc_bilm_inputs' token indexer "
                f"with the same key (a tensor named elmo_tokens), but got {sorted(unexpected)}: "
                "check the dataset reader's token_indexers"
            )
        representation = self._elmo(elmo_tokens)["elmo_representations"][0]
        if self._projection is not None:
            projection = self._projection
            for _ in range(representation.dim() - 2):
                projection = TimeDistributed(projection)
            representation = projection(representation)
        return representation
