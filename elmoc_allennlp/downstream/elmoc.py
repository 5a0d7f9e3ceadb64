"""A trained biLM downstream: `ElmocBiLm` returns all layers (as `_ElmoBiLm`), `ElmocElmo` mixes them."""

from typing import Dict, List, Optional, Tuple, Union

import torch

from allennlp.common.checks import ConfigurationError, check_dimensions_match
from allennlp.modules.elmo import Elmo
from torch.nn.utils.rnn import pad_sequence

from elmoc_allennlp.common.checks import check_non_negative, check_positive, check_probability
from elmoc_allennlp.common.precision import check_dtype, prepare_encoder
from elmoc_allennlp.downstream.archive import BilmArchive
from elmoc_allennlp.downstream.layer_cache import LayerCache


class ElmocBiLm(torch.nn.Module):
    """
    A trained biLM's layers (in eval mode) with boundaries, as `_ElmoBiLm`; `indexer` is its own indexer.

    # Parameters

    archive_file : `str`
        The trained biLM: the `model.tar.gz` of its `allennlp train` run (or that run's folder, or a
        URL). A relative path resolves against the working directory, as allennlp's data paths do.
    requires_grad : `bool`, optional (default = `False`)
        Fine-tune the biLM's parameters with the downstream model. `False` (ELMo's default) keeps it
        frozen, as ELMo is used; the layer cache needs it frozen.
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, where it is on this machine. `None`: the
        path the archive records, else its last 1-3 path components under the archive's folder and
        that folder's parent; `ELMOC_VECTORS_PATH`, if set, overrides both. It must be the biLM's
        own model (its fingerprint is recorded in the biLM's weights) unless
        `allow_different_vectors`; a biLM whose input is not fastText takes none.
    allow_different_vectors : `bool`, optional (default = `False`)
        Accept a fastText `.bin` other than the one the biLM was trained with (another fingerprint),
        with a warning. Off by default because the biLM's input projection and output layer live in
        its own fastText model's vector space: only for a deliberate swap.
    serialization_dir : `str`, optional (default = `None`)
        The downstream run's folder, given by allennlp (not in the config). A downstream archive
        carries a copy of the biLM (`elmoc_bilm/`): loading it reads that copy instead of
        `archive_file`, which may then be gone.
    dtype : `str`, optional (default = `"float32"`)
        The precision the frozen biLM runs in: `"float32"` (as trained), `"bfloat16"` (its linear
        maps in bfloat16 where the device has native bfloat16: CPUs with AVX-512 BF16 or AMX, CUDA
        GPUs that support it; elsewhere float32, with one warning saying so) or `"int8"` (its
        linear maps dynamically quantized; CPU only). The recurrence's states and LayerNorms, and
        the layers returned, stay float32 (docs/benchmarks.md#inference-precision). Not with
        `requires_grad`.
    """

    def __init__(
        self,
        archive_file: str,
        requires_grad: bool = False,
        vectors_path: Optional[str] = None,
        allow_different_vectors: bool = False,
        serialization_dir: Optional[str] = None,
        dtype: str = "float32",
    ) -> None:
        super().__init__()
        check_dtype(dtype, "dtype")
        if dtype != "float32" and requires_grad:
            raise ConfigurationError(
                f"dtype {dtype} runs a frozen biLM, but requires_grad is true (the biLM is "
                "fine-tuned): set one of them only"
            )
        self.archive = BilmArchive.open(archive_file, vectors_path, serialization_dir)
        model, reader = self.archive.open_for_training(serialization_dir, allow_different_vectors)
        self._bilm = model
        self._bilm.eval()
        for parameter in self._bilm.parameters():
            parameter.requires_grad_(requires_grad)
        self.requires_grad = requires_grad
        self.indexer = reader.token_indexers[self.archive.input_key]  # the pretraining indexer
        self.input_kind = self.archive.input_kind
        boundaries = [
            torch.tensor(self.input_kind.boundary_ids(self.indexer, model.vocab, token))
            for token in (self.archive.start_token, self.archive.end_token)
        ]
        # `(2, width)`: the start and end tokens' input ids, as in pretraining (0 padding).
        self.register_buffer(
            "boundary_ids", pad_sequence(boundaries, batch_first=True), persistent=False
        )

        self.num_layers = self.archive.num_layers
        self._output_dim = model.contextualizer.get_output_dim()
        # One dummy sentence: the encoder must return what the config promises.
        with torch.no_grad():
            layers = self(self.boundary_ids.new_ones(1, 1, 1))["activations"]
        shape = (len(layers), *layers[0].shape)
        expected = (self.num_layers, 1, 3, self._output_dim)
        check_dimensions_match(
            shape, expected, "biLM layers (layers, batch, timesteps, dim)", "its config"
        )
        # Prepared (`prepare_dtype`) where it first runs, after the float32 check above.
        self.dtype = dtype
        self._prepared: Optional[Tuple[str, str]] = None  # (device type, running dtype)

    # Set by `ElmocElmo` from `cache_directory`.
    layer_cache: Optional[LayerCache] = None
    dtype = "float32"
    _prepared: Optional[Tuple[str, str]] = None

    def prepare_dtype(self, device: Union[str, torch.device]) -> str:
        """
        Prepares the biLM to run at `dtype` on `device` (once: where it first runs, or where
        `ElmocEmbedder` puts it); returns the precision it runs at there.
        """
        device = torch.device(device)
        if self._prepared is None:
            running = prepare_encoder(self._bilm.contextualizer, self.dtype, device)
            self._prepared = (device.type, running)
        elif self._prepared[0] != device.type and self.dtype != "float32":
            raise ConfigurationError(
                f"dtype {self.dtype}: the biLM was prepared for the {self._prepared[0]} and now "
                f"runs on {device}; load it on the device it runs on"
            )
        return self._prepared[1]

    def train(self, mode: bool = True) -> "ElmocBiLm":
        super().train(mode)
        self._bilm.eval()
        return self

    def get_output_dim(self) -> int:
        return self._output_dim

    @property
    def bilm(self):  # the wrapped `BidirectionalLanguageModel`
        return self._bilm

    def forward(
        self, inputs: torch.Tensor, word_inputs: torch.Tensor = None
    ) -> Dict[str, Union[torch.Tensor, List[torch.Tensor]]]:
        """`{"activations": [layer_0, ..., layer_L], "mask": mask}`, each `(batch, timesteps + 2, output_dim)`."""
        if word_inputs is not None:
            raise ConfigurationError("ELMo-C has no cached vocabulary: word_inputs must be None")
        check_dimensions_match(
            inputs.dim(), 3, "inputs.dim()", "(batch_size, timesteps, num_subwords)"
        )
        if self.requires_grad:  # trained with the model, in the trainer's precision
            return self.live_layers(inputs)
        # A frozen biLM runs at its `dtype`, whatever autocast the trainer's `precision` set
        # (and so fills a layer cache with what that precision computes).
        with torch.autocast(inputs.device.type, enabled=False):
            if self.layer_cache is not None:
                return self.layer_cache.activations(self, inputs, self.live_layers)
            return self.live_layers(inputs)

    def live_layers(
        self, inputs: torch.Tensor
    ) -> Dict[str, Union[torch.Tensor, List[torch.Tensor]]]:
        """What `forward` returns, computed by the biLM (without the layer cache)."""
        if self.dtype != "float32" and self._prepared is None:
            self.prepare_dtype(inputs.device)
        key = self.archive.input_key
        layers, mask = self.input_kind.contextual_layers(self._bilm, key, inputs, self.boundary_ids)
        return {"activations": list(layers.unbind(0)), "mask": mask}


class ElmocElmo(Elmo):
    """
    ELMo representations (Peters et al. 2018, eq. 1) from a trained ELMo-C biLM: `Elmo` on `ElmocBiLm`.

    # Parameters

    archive_file : `str`
        The trained biLM: the `model.tar.gz` of its `allennlp train` run (or that run's folder, or a
        URL). A relative path resolves against the working directory, as allennlp's data paths do.
        Not read when `module` is given.
    num_output_representations : `int`
        How many representations to return, each with its own scalar mix (allennlp `Elmo`'s: e.g.
        `bcn` mixes one for its input and one for its integrator's output).
    requires_grad : `bool`, optional (default = `False`)
        Fine-tune the biLM's parameters with the downstream model. `False` (ELMo's default) keeps it
        frozen, as ELMo is used; the layer cache needs it frozen.
    do_layer_norm : `bool`, optional (default = `False`)
        Layer-normalize each biLM layer before the scalar mix (allennlp `Elmo`'s option, passed to
        its `ScalarMix`; ELMo's default is off).
    dropout : `float`, optional (default = `0.5`)
        Dropout on the mixed representation, in [0, 1] (allennlp `Elmo`'s default).
    keep_sentence_boundaries : `bool`, optional (default = `False`)
        Keep the representations of the boundary tokens the biLM adds around each sentence (allennlp
        `Elmo`'s option); `False`: one representation per input token.
    scalar_mix_parameters : `List[float]`, optional (default = `None`)
        Fixed pre-softmax weights of the scalar mix, one per biLM layer (the projected input, then
        each LSTM layer), not trained: `[-9e10, -9e10, 1]` takes the top layer of a 2-layer biLM.
        `None`: weights learned from an equal start. Not with `scalar_mix_l2_penalty`.
    scalar_mix_l2_penalty : `float`, optional (default = `0.0`)
        `lambda` of `lambda * ||s||^2` on the mixing weights (ELMo, section 3.3), added to their
        gradient only (the reported loss does not include it). Non-negative; `0.0`: none. Not with
        `scalar_mix_parameters`. The recipes use a model-level `regularizer` instead.
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, where it is on this machine. `None`: the
        path the archive records, else its last 1-3 path components under the archive's folder and
        that folder's parent; `ELMOC_VECTORS_PATH`, if set, overrides both. It must be the biLM's
        own model (its fingerprint is recorded in the biLM's weights) unless
        `allow_different_vectors`; a biLM whose input is not fastText takes none.
    module : `ElmocBiLm`, optional (default = `None`)
        An already loaded biLM, used instead of `archive_file`.
    allow_different_vectors : `bool`, optional (default = `False`)
        Accept a fastText `.bin` other than the one the biLM was trained with (another fingerprint),
        with a warning. Off by default because the biLM's input projection and output layer live in
        its own fastText model's vector space: only for a deliberate swap.
    serialization_dir : `str`, optional (default = `None`)
        The downstream run's folder, given by allennlp (not in the config). A downstream archive
        carries a copy of the biLM (`elmoc_bilm/`): loading it reads that copy instead of
        `archive_file`, which may then be gone.
    projection_dim : `int`, optional (default = `None`)
        Project each representation to this size (its own trained linear layer): `1024` fits any
        biLM into a recipe sized for ELMo (e.g. `bcn`'s `elmo` block).
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
        the layers returned, stay float32 (docs/benchmarks.md#inference-precision). Not with
        `requires_grad`. With `module`, the module's own.
    """

    def __init__(
        self,
        archive_file: str,
        num_output_representations: int,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Optional[List[float]] = None,
        scalar_mix_l2_penalty: float = 0.0,
        vectors_path: Optional[str] = None,
        module: Optional[ElmocBiLm] = None,
        allow_different_vectors: bool = False,
        serialization_dir: Optional[str] = None,
        projection_dim: Optional[int] = None,
        cache_directory: Optional[str] = None,
        cache_dtype: str = "float32",
        dtype: str = "float32",
    ) -> None:
        check_positive(projection_dim, "projection_dim", allow_none=True)
        check_positive(num_output_representations, "num_output_representations")
        check_probability(dropout, "dropout")
        check_non_negative(scalar_mix_l2_penalty, "scalar_mix_l2_penalty")
        if scalar_mix_parameters is not None and scalar_mix_l2_penalty > 0:
            raise ConfigurationError(
                "set only one of scalar_mix_parameters and scalar_mix_l2_penalty"
            )
        bilm = module
        check_dtype(dtype, "dtype")
        if bilm is not None and dtype != "float32" and bilm.dtype != dtype:
            raise ConfigurationError(
                f"dtype is {dtype}, but the given module runs at {bilm.dtype}: leave dtype out"
            )
        if bilm is None:
            bilm = ElmocBiLm(
                archive_file,
                requires_grad,
                vectors_path,
                allow_different_vectors,
                serialization_dir,
                dtype,
            )
        if cache_directory is not None:
            if bilm.requires_grad:
                raise ConfigurationError(
                    "cache_directory caches the layers of a frozen biLM, but requires_grad is true "
                    "(the biLM is fine-tuned): set one of them only"
                )
            bilm.layer_cache = LayerCache(cache_directory, cache_dtype)
        if scalar_mix_parameters is not None and len(scalar_mix_parameters) != bilm.num_layers:
            raise ConfigurationError(
                f"scalar_mix_parameters has {len(scalar_mix_parameters)} weights, "
                f"but the biLM has {bilm.num_layers} layers"
            )
        super().__init__(
            options_file=None,
            weight_file=None,
            num_output_representations=num_output_representations,
            do_layer_norm=do_layer_norm,
            dropout=dropout,
            keep_sentence_boundaries=keep_sentence_boundaries,
            scalar_mix_parameters=scalar_mix_parameters,
            module=bilm,
        )
        self._projections = None
        if projection_dim is not None:
            self._projections = torch.nn.ModuleList(
                torch.nn.Linear(bilm.get_output_dim(), projection_dim)
                for _ in range(num_output_representations)
            )
        penalty = scalar_mix_l2_penalty
        for scalar_mix in self._scalar_mixes if penalty > 0 else []:
            for parameter in scalar_mix.scalar_parameters:
                # The gradient of `penalty * s^2`, added to the parameter's own.
                parameter.register_hook(
                    lambda gradient, s=parameter: gradient + 2.0 * penalty * s.detach()
                )

    @property
    def bilm(self) -> ElmocBiLm:
        return self._elmo_lstm

    def get_output_dim(self) -> int:
        if self._projections is not None:
            return self._projections[0].out_features
        return self._elmo_lstm.get_output_dim()

    def forward(self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor] = None):  # type: ignore
        output = super().forward(inputs, word_inputs)
        if self._projections is not None:
            representations = zip(self._projections, output["elmo_representations"])
            output["elmo_representations"] = [
                projection(mixed) for projection, mixed in representations
            ]
        return output
