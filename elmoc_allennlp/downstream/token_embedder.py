"""`elmoc_token_embedder`: one ELMo representation of a trained biLM, in place of ELMo's blocks."""

from typing import List, Optional, Tuple

import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.modules.token_embedders.token_embedder import TokenEmbedder

from elmoc_allennlp.common.checks import check_positive
from elmoc_allennlp.downstream.archive import NamingTheConfigKey
from elmoc_allennlp.downstream.elmoc import ElmocElmo


def reject_elmo_only_options(params: Params) -> None:
    """ELMo's `options_file`, `weight_file` and `vocab_to_cache` (unless null) are an error naming the key."""
    present = [f"{params.history}{key}" for key in ("options_file", "weight_file") if key in params]
    if present:
        raise ConfigurationError(
            f"ELMo-C takes archive_file; remove options_file and weight_file ({', '.join(present)})"
        )
    if params.pop("vocab_to_cache", None) is not None:
        raise ConfigurationError(
            f"{params.history}vocab_to_cache: ELMo-C has no word cache; remove it"
        )


@TokenEmbedder.register("elmoc_token_embedder")
class ElmocTokenEmbedder(NamingTheConfigKey, TokenEmbedder):
    """
    One ELMo representation from a trained ELMo-C biLM, in place of `elmo_token_embedder` (or
    `bidirectional_lm_token_embedder`) in allennlp-models configs, with an `elmoc_bilm_inputs` indexer.

    Registered as a `TokenEmbedder` with name "elmoc_token_embedder".

    # Parameters

    archive_file : `str`
        The trained biLM: the `model.tar.gz` of its `allennlp train` run (or that run's folder, or a
        URL). A relative path resolves against the working directory, as allennlp's data paths do.
        The same as the `elmoc_bilm_inputs` indexer's.
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, where it is on this machine. `None`: the
        path the archive records, else its last 1-3 path components under the archive's folder and
        that folder's parent; `ELMOC_VECTORS_PATH`, if set, overrides both. It must be the biLM's
        own model (its fingerprint is recorded in the biLM's weights) unless
        `allow_different_vectors`; a biLM whose input is not fastText takes none.
    do_layer_norm : `bool`, optional (default = `False`)
        Layer-normalize each biLM layer before the scalar mix (allennlp `Elmo`'s option, passed to
        its `ScalarMix`; ELMo's default is off).
    dropout : `float`, optional (default = `0.5`)
        Dropout on the mixed representation, in [0, 1] (allennlp `Elmo`'s default).
    requires_grad : `bool`, optional (default = `False`)
        Fine-tune the biLM's parameters with the downstream model. `False` (ELMo's default) keeps it
        frozen, as ELMo is used; the layer cache needs it frozen.
    projection_dim : `int`, optional (default = `None`)
        Project the representation to this size by a trained linear layer: `1024` (ELMo's size) fits
        any biLM into a recipe sized for ELMo. `None`: the biLM's own size, `2 * projection_dim`.
    scalar_mix_parameters : `List[float]`, optional (default = `None`)
        Fixed pre-softmax weights of the scalar mix, one per biLM layer (the projected input, then
        each LSTM layer), not trained: `[-9e10, -9e10, 1]` takes the top layer of a 2-layer biLM.
        `None`: weights learned from an equal start. Not with `scalar_mix_l2_penalty`.
    scalar_mix_l2_penalty : `float`, optional (default = `0.0`)
        `lambda` of `lambda * ||s||^2` on the mixing weights (ELMo, section 3.3), added to their
        gradient only (the reported loss does not include it). Non-negative; `0.0`: none. Not with
        `scalar_mix_parameters`. The recipes use a model-level `regularizer` instead.
    allow_different_vectors : `bool`, optional (default = `False`)
        Accept a fastText `.bin` other than the one the biLM was trained with (another fingerprint),
        with a warning. Off by default because the biLM's input projection and output layer live in
        its own fastText model's vector space: only for a deliberate swap.
    bilm_dim : `int`, optional (default = `None`)
        The biLM size the config expects (`ELMOC_DIM` in the downstream configs), checked against
        the archive's `2 * projection_dim`: a mismatch is an error naming both. `None`: not checked.
    bos_eos_tokens : `Tuple[str, str]`, optional (default = `None`)
        For configs written for `bidirectional_lm_token_embedder`: ELMo-C adds the biLM's own
        boundary tokens (`<S>`, `</S>`) itself, so these must be those (others are an error naming
        both). `None`: the biLM's.
    remove_bos_eos : `bool`, optional (default = `True`)
        Drop the boundary tokens' representations, one output per input token, as
        `bidirectional_lm_token_embedder` does; `False` keeps them (two more timesteps).
    serialization_dir : `str`, optional (default = `None`)
        The downstream run's folder, given by allennlp (not in the config). A downstream archive
        carries a copy of the biLM (`elmoc_bilm/`): loading it reads that copy instead of
        `archive_file`, which may then be gone.
    cache_directory : `str`, optional (default = `None`)
        A folder in which the frozen biLM's layers are stored per sentence the first time it is seen
        and read after that (docs/layer_cache.md): the same losses and metrics, without running the
        biLM again. Created if missing; runs, DDP ranks and biLMs can share it. `None`: no cache.
        Refused with `requires_grad`.
    cache_dtype : `str`, optional (default = `"float32"`)
        How the cache stores layers: `"float32"` (exact) or `"float16"` (half the disk, rounded).
    dtype : `str`, optional (default = `"float32"`)
        The precision the frozen biLM runs in: `"float32"` (as trained), `"bfloat16"` (its linear
        maps in bfloat16 where the device has native bfloat16: CPUs with AVX-512 BF16 or AMX, CUDA
        GPUs that support it; elsewhere float32, with one warning saying so) or `"int8"` (its
        linear maps dynamically quantized; CPU only). The recurrence's states and LayerNorms, and
        the representation, stay float32 (docs/benchmarks.md#inference-precision). A layer cache
        keeps the layers of each precision apart. Not with `requires_grad`.
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
        cache_directory: Optional[str] = None,
        cache_dtype: str = "float32",
        dtype: str = "float32",
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
            cache_directory=cache_directory,
            cache_dtype=cache_dtype,
            dtype=dtype,
        )
        archive = self._elmo.bilm.archive
        boundaries = [archive.start_token, archive.end_token]
        if bos_eos_tokens is not None and list(bos_eos_tokens) != boundaries:
            raise ConfigurationError(
                f"bos_eos_tokens is {list(bos_eos_tokens)}, but the ELMo-C biLM {archive_file} was "
                f"pretrained with {boundaries}: leave bos_eos_tokens out"
            )
        elmo_dim = self._elmo.get_output_dim()
        if bilm_dim is not None and bilm_dim != elmo_dim:
            raise ConfigurationError(
                f"elmoc_token_embedder.bilm_dim (ELMOC_DIM in the downstream configs) is {bilm_dim}, "
                f"but the biLM archive {archive_file} gives {elmo_dim}-dimensional representations"
            )
        self._projection: Optional[torch.nn.Linear] = None
        if projection_dim:
            self._projection = torch.nn.Linear(elmo_dim, projection_dim)
        self.output_dim = projection_dim or elmo_dim

    @classmethod
    def from_params(
        cls, params: Params, constructor_to_call=None, constructor_to_inspect=None, **extras
    ):
        reject_elmo_only_options(params)
        return super().from_params(params, constructor_to_call, constructor_to_inspect, **extras)

    def get_output_dim(self) -> int:
        return self.output_dim

    @property
    def elmo(self) -> ElmocElmo:
        return self._elmo

    def forward(self, elmo_tokens: torch.Tensor = None, **unexpected) -> torch.Tensor:
        """`(batch_size, timesteps, output_dim)`, zero at padding, of the `elmoc_bilm_inputs` indexer's ids."""
        if elmo_tokens is None or unexpected:
            raise ConfigurationError(
                "The elmoc_token_embedder reads the elmo_tokens of an 'elmoc_bilm_inputs' indexer "
                f"with the same key, but got {sorted(unexpected)}"
            )
        representation = self._elmo(elmo_tokens)["elmo_representations"][0]
        if self._projection is not None:
            representation = self._projection(representation)
        return representation
