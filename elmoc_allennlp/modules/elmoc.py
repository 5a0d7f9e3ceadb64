"""
Using a trained ELMo-C biLM downstream, in the roles of allennlp's `allennlp/modules/elmo.py`:

* `ElmocArchive` reads a biLM `model.tar.gz` (its `config.json` only), checks that it is an ELMo-C
  biLM with fastText input, and finds the fastText model it needs on this machine;
* `ElmocBiLm` runs the trained biLM and returns every layer (the role of allennlp's `_ElmoBiLm`);
* `ElmocElmo` mixes the layers into `num_output_representations` ELMo representations (it *is* an
  allennlp `Elmo`, built around `ElmocBiLm`, so models that take an `Elmo` accept it).
"""
import itertools
import json
import logging
import os
import tarfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy
import torch

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path
from allennlp.models.archival import CONFIG_NAME, load_archive
from allennlp.modules.elmo import Elmo

from elmoc_allennlp.modules.fasttext_vectors import FastTextVectors

logger = logging.getLogger(__name__)

# The fastText input of an ELMo-C biLM: these registered names, joined by the text field key.
FASTTEXT_EMBEDDER_TYPE = "fasttext"
FASTTEXT_INDEXER_TYPE = "fasttext_subwords"
VECTORS_PATH_KEY = "vectors_path"
# Defaults of `LanguageModelCorpusReader` and `FastTextSubwordIndexer`.
DEFAULT_START_TOKEN = "<S>"
DEFAULT_END_TOKEN = "</S>"
DEFAULT_BOUNDARY_TOKENS = ["<S>", "</S>"]
# How many trailing components of a recorded vectors path are tried relative to the archive.
_MAX_RELATIVE_COMPONENTS = 3


def _find_keys(config: Any, key: str, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """Yields `(dotted path, value)` for every occurrence of `key` in a nested config."""
    if isinstance(config, dict):
        for name, value in config.items():
            path = f"{prefix}.{name}" if prefix else name
            if name == key and not isinstance(value, (dict, list)):
                yield path, value
            else:
                yield from _find_keys(value, key, path)
    elif isinstance(config, list):
        for index, value in enumerate(config):
            yield from _find_keys(value, key, f"{prefix}.{index}")


class ElmocArchive:
    """
    What a downstream user needs to know about an ELMo-C biLM archive, read from its
    `config.json` without loading the weights: the text field key of its fastText input, the
    sentence boundary tokens it was pretrained with, and where the fastText model it needs is on
    this machine.

    The fastText `.bin` is not inside the archive: the archive's config records its path (at
    `dataset_reader.token_indexers.<key>.vectors_path` and
    `model.text_field_embedder.token_embedders.<key>.vectors_path`). That path is used if it
    exists. Otherwise the file is looked for relative to the archive, so that an archive moved
    to another machine together with its vectors still works: the recorded path's last one,
    two and three components under the archive's directory and under its parent (e.g.
    `runs/elmoc/model.tar.gz` finds `runs/elmoc/crawl-300d-2M-subword.bin` or
    `runs/fasttext/crawl-300d-2M-subword.bin`). `vectors_path` overrides all of this. A file
    that cannot be found raises a `ConfigurationError` naming it, the archive's config key and
    the `vectors_path` option.

    Use `ElmocArchive.read`, which also rejects archives that are not ELMo-C biLMs with a
    `ConfigurationError` naming the offending config key.

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (or its serialization directory, or a URL).
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, overriding the path in the archive.
    """

    def __init__(self, archive_file: Union[str, os.PathLike], vectors_path: Optional[str] = None):
        self.archive_file = str(archive_file)
        try:
            self.local_path = Path(cached_path(self.archive_file))
        except FileNotFoundError:
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file} (archive_file) does not exist"
            ) from None
        self.config = self._read_config()
        self._check_model_type()
        self.input_key = self._find_input_key()
        reader = self.config.get("dataset_reader", {})
        indexer = reader.get("token_indexers", {}).get(self.input_key, {})
        self.boundary_tokens: List[str] = list(
            indexer.get("boundary_tokens", DEFAULT_BOUNDARY_TOKENS)
        )
        # Whether pretraining lowercased tokens (`fasttext_subwords`'s lowercase_tokens).
        self.lowercase_tokens = bool(indexer.get("lowercase_tokens", False))
        # Pretraining may have truncated long tokens (`elmoc_lm_corpus`'s max_token_characters).
        self.max_token_characters: Optional[int] = reader.get("max_token_characters")
        self.start_token = reader.get("start_token", DEFAULT_START_TOKEN)
        self.end_token = reader.get("end_token", DEFAULT_END_TOKEN)
        if not self.start_token or not self.end_token:
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file} was pretrained without sentence boundary "
                f"tokens (dataset_reader.start_token={self.start_token!r}, "
                f"dataset_reader.end_token={self.end_token!r}); ELMo-C representations are "
                "computed with the boundaries the biLM was trained with"
            )
        self.vectors_overrides = self._resolve_vectors_paths(vectors_path)
        self.input_vectors_path = self.vectors_overrides[
            f"model.text_field_embedder.token_embedders.{self.input_key}.{VECTORS_PATH_KEY}"
        ]
        self._check_vectors_dim()

    @classmethod
    def read(
        cls, archive_file: Union[str, os.PathLike], vectors_path: Optional[str] = None
    ) -> "ElmocArchive":
        return cls(archive_file, vectors_path)

    # ------------------------------------------------------------------ config

    def _read_config(self) -> Dict[str, Any]:
        path = self.local_path
        if path.is_dir():
            config_path = path / CONFIG_NAME
            if not config_path.is_file():
                raise ConfigurationError(
                    f"ELMo-C archive directory {self.archive_file} (archive_file) has no "
                    f"{CONFIG_NAME}; expected a model.tar.gz or a serialization directory"
                )
            text = config_path.read_text(encoding="utf-8")
        else:
            if not tarfile.is_tarfile(path):
                raise ConfigurationError(
                    f"ELMo-C archive {self.archive_file} (archive_file) is not a model archive "
                    "(a model.tar.gz written by `allennlp train`)"
                )
            text = None
            # allennlp writes config.json first: stop at it instead of decompressing the weights.
            with tarfile.open(path, "r:*") as archive:
                for member in archive:
                    if member.isfile() and os.path.normpath(member.name) == CONFIG_NAME:
                        handle = archive.extractfile(member)
                        assert handle is not None
                        text = handle.read().decode("utf-8")
                        break
            if text is None:
                raise ConfigurationError(
                    f"ELMo-C archive {self.archive_file} (archive_file) has no {CONFIG_NAME}; "
                    "it is not a model archive written by `allennlp train`"
                )
        try:
            config = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigurationError(
                f"The {CONFIG_NAME} of ELMo-C archive {self.archive_file} is not JSON ({error})"
            ) from None
        if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
            raise ConfigurationError(
                f"The {CONFIG_NAME} of ELMo-C archive {self.archive_file} has no model section"
            )
        return config

    def _check_model_type(self) -> None:
        from allennlp.models import Model

        from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel

        model_type = self.config["model"].get("type")
        model_class = None
        if isinstance(model_type, str):
            try:
                model_class, _ = Model.resolve_class_name(model_type)
            except ConfigurationError:
                model_class = None
        is_bilm = isinstance(model_class, type) and issubclass(
            model_class, BidirectionalLanguageModel
        )
        if not is_bilm:
            raise ConfigurationError(
                f"{self.archive_file} (archive_file) is not an ELMo-C biLM archive: its "
                f"model.type is {model_type!r}, expected 'elmoc_bilm' (a "
                "BidirectionalLanguageModel, pretrained with training_configs/pretrain/)"
            )
        directions = self.config["model"].get("directions", "both")
        if directions != "both":
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file} trained only the {directions} language model "
                f"(model.directions = {directions!r}); merge it with the other direction's "
                "archive first (`allennlp elmoc-merge-bilm`)"
            )
        from allennlp.modules import Seq2SeqEncoder

        contextualizer = self.config["model"].get("contextualizer")
        encoder_type = contextualizer.get("type") if isinstance(contextualizer, dict) else None
        try:
            encoder_class = (
                Seq2SeqEncoder.resolve_class_name(encoder_type)[0] if encoder_type else None
            )
        except ConfigurationError:
            encoder_class = None
        if encoder_class is None or not hasattr(encoder_class, "forward_all_layers"):
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file}: model.contextualizer is {encoder_type!r}, "
                "which cannot return all of its layers; expected 'elmoc_lstm'"
            )
        if "projection_dim" not in contextualizer:
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file}: model.contextualizer has no projection_dim"
            )

    def _find_input_key(self) -> str:
        model = self.config["model"]
        embedders = model.get("text_field_embedder", {}).get("token_embedders", {})
        used = {
            key: spec.get("type") if isinstance(spec, dict) else spec
            for key, spec in embedders.items()
            if not (isinstance(spec, dict) and spec.get("type") == "empty")
        }
        fasttext_keys = [key for key, kind in used.items() if kind == FASTTEXT_EMBEDDER_TYPE]
        if len(used) != 1 or len(fasttext_keys) != 1:
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file}: model.text_field_embedder.token_embedders "
                f"are {used}; downstream ELMo-C needs a biLM whose only input is fastText (one "
                f"'{FASTTEXT_EMBEDDER_TYPE}' token embedder), e.g. training_configs/pretrain/"
                "elmoc.jsonnet"
            )
        key = fasttext_keys[0]
        indexers = self.config.get("dataset_reader", {}).get("token_indexers", {})
        indexer = indexers.get(key)
        indexer_type = indexer.get("type") if isinstance(indexer, dict) else None
        if indexer_type != FASTTEXT_INDEXER_TYPE:
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file}: dataset_reader.token_indexers.{key} must "
                f"be a '{FASTTEXT_INDEXER_TYPE}' indexer (it is {indexer_type!r})"
            )
        return key

    # ------------------------------------------------------------------ fastText paths

    def _archive_directories(self) -> List[Path]:
        directory = self.local_path if self.local_path.is_dir() else self.local_path.parent
        directory = directory.resolve()
        return [directory, directory.parent]

    def _candidates(self, recorded: str) -> List[Path]:
        recorded_path = Path(recorded).expanduser()
        candidates = [recorded_path]
        parts = recorded_path.parts[1:] if recorded_path.is_absolute() else recorded_path.parts
        if not recorded_path.is_absolute():
            candidates.extend(base / recorded_path for base in self._archive_directories())
        for count in range(1, min(_MAX_RELATIVE_COMPONENTS, len(parts)) + 1):
            for base in self._archive_directories():
                candidates.append(base.joinpath(*parts[-count:]))
        unique: List[Path] = []
        for candidate in candidates:
            if candidate not in unique:
                unique.append(candidate)
        return unique

    def _resolve_vectors_paths(self, vectors_path: Optional[str]) -> Dict[str, str]:
        """Dotted config key -> the existing file to use, for every `vectors_path` in the config."""
        input_keys = {
            f"dataset_reader.token_indexers.{self.input_key}.{VECTORS_PATH_KEY}",
            f"model.text_field_embedder.token_embedders.{self.input_key}.{VECTORS_PATH_KEY}",
        }
        recorded_paths = dict(_find_keys(self.config, VECTORS_PATH_KEY))
        missing_keys = input_keys - set(recorded_paths)
        if missing_keys:
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file}: its config has no {sorted(missing_keys)}"
            )
        input_recorded = recorded_paths[
            f"model.text_field_embedder.token_embedders.{self.input_key}.{VECTORS_PATH_KEY}"
        ]
        if vectors_path is not None and not Path(vectors_path).expanduser().is_file():
            raise ConfigurationError(
                f"fastText model {vectors_path} (vectors_path) does not exist"
            )
        resolved: Dict[str, str] = {}
        for key, recorded in recorded_paths.items():
            if vectors_path is not None and (key in input_keys or recorded == input_recorded):
                resolved[key] = str(Path(vectors_path).expanduser())
                continue
            candidates = self._candidates(str(recorded))
            found = next((path for path in candidates if path.is_file()), None)
            if found is None:
                looked = ", ".join(str(path) for path in candidates[1:])
                raise ConfigurationError(
                    f"ELMo-C archive {self.archive_file} needs the fastText model {recorded} (its "
                    f"config key {key}), which does not exist on this machine; also looked for "
                    f"it relative to the archive: {looked}. Copy the .bin next to the archive "
                    "or give its path as `vectors_path` (of the `elmoc_subwords` indexer and "
                    "the `elmoc_token_embedder`, or --vectors-path of `allennlp elmoc-embed`)"
                )
            if found != Path(str(recorded)):
                logger.info("ELMo-C archive %s: using %s for %s", self.archive_file, found, key)
            resolved[key] = str(found)
        return resolved

    def _check_vectors_dim(self) -> None:
        contextualizer = self.config["model"]["contextualizer"]
        expected = contextualizer.get("input_dim")
        vectors = FastTextVectors.from_path(self.input_vectors_path)
        if expected is not None and vectors.dim != expected:
            raise ConfigurationError(
                f"fastText model {self.input_vectors_path} has dimension {vectors.dim}, but the "
                f"ELMo-C archive {self.archive_file} was pretrained on {expected}-dimensional "
                "vectors (model.contextualizer.input_dim): wrong vectors_path?"
            )

    # ------------------------------------------------------------------ properties

    @property
    def num_layers(self) -> int:
        """Layers of representations: the projected input plus every LSTM layer."""
        return int(self.config["model"]["contextualizer"].get("num_layers", 2)) + 1

    @property
    def output_dim(self) -> int:
        """`2 * projection_dim`: `[forward; backward]`."""
        return 2 * int(self.config["model"]["contextualizer"]["projection_dim"])

    def load_model(self, cuda_device: int = -1):
        """Loads the biLM (a `BidirectionalLanguageModel`) with the resolved fastText paths."""
        archive = load_archive(
            str(self.local_path), cuda_device=cuda_device, overrides=dict(self.vectors_overrides)
        )
        return archive.model, archive.dataset_reader


class ElmocBiLm(torch.nn.Module):
    """
    Runs a trained ELMo-C biLM and returns all of its layers, in the role of allennlp's
    `_ElmoBiLm`: the input is the output of the `elmoc_subwords` indexer (fastText subword ids
    of each token, no sentence boundaries), the boundary tokens the biLM was pretrained with
    (`<S>`, `</S>`) are added in index space, and the output is
    `{"activations": [layer_0, ..., layer_L], "mask": mask}` with each layer of shape
    `(batch_size, timesteps + 2, 2 * projection_dim)` *including* the boundaries, as
    allennlp's `Elmo` expects of its `module`. Layer 0 is each direction's projected input
    (`[x_forward; x_backward]`, `[x; x]` with one shared projection), layer j >= 1 is
    `[forward_j; backward_j]`.

    The biLM is always run in eval mode (no recurrent dropout): its representations are
    deterministic features, as ELMo's are. By default its parameters are frozen. The biLM's own
    pretraining indexer (a `FastTextSubwordIndexer`, which gives the same ids as the
    `elmoc_subwords` indexer) is the `indexer` attribute.

    # Parameters

    archive_file : `str`
        An ELMo-C biLM `model.tar.gz` (see `ElmocArchive`).
    requires_grad : `bool`, optional (default = `False`)
        If `True`, the biLM's parameters are fine-tuned with the downstream model.
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` of the biLM, if not where the archive says (see `ElmocArchive`).
    """

    def __init__(
        self,
        archive_file: str,
        requires_grad: bool = False,
        vectors_path: Optional[str] = None,
    ) -> None:
        super().__init__()
        self.archive = ElmocArchive.read(archive_file, vectors_path)
        model, reader = self.archive.load_model()
        contextualizer = model._contextualizer
        if not hasattr(contextualizer, "forward_all_layers"):
            raise ConfigurationError(
                f"ELMo-C archive {archive_file}: model.contextualizer "
                f"({type(contextualizer).__name__}) cannot return all of its layers"
            )
        self._bilm = model
        self._bilm.eval()
        for parameter in self._bilm.parameters():
            parameter.requires_grad_(requires_grad)
        self.requires_grad = requires_grad

        # The biLM's own fastText indexer (a `FastTextSubwordIndexer`), as used in pretraining.
        indexer = reader._token_indexers[self.archive.input_key]
        self.indexer = indexer
        begin = indexer.token_subword_ids(self.archive.start_token)
        end = indexer.token_subword_ids(self.archive.end_token)
        width = max(len(begin), len(end))
        boundaries = torch.zeros(2, width, dtype=torch.long)
        boundaries[0, : len(begin)] = torch.tensor(begin)
        boundaries[1, : len(end)] = torch.tensor(end)
        self.register_buffer("_boundary_ids", boundaries, persistent=False)

        self.num_layers = self.archive.num_layers
        self._output_dim = contextualizer.get_output_dim()
        self._check_layers()

    def _check_layers(self) -> None:
        # One dummy sentence: the encoder must return what the config promises.
        with torch.no_grad():
            layers = self(self._boundary_ids.new_ones(1, 1, 1))["activations"]
        shape = (len(layers), *layers[0].shape)
        expected = (self.num_layers, 1, 3, self._output_dim)
        if shape != expected:
            raise ConfigurationError(
                f"ELMo-C archive {self.archive.archive_file}: the biLM returned layers of shape "
                f"{shape}, expected {expected} from model.contextualizer (num_layers + 1, batch, "
                "timesteps with boundaries, 2 * projection_dim)"
            )

    def train(self, mode: bool = True) -> "ElmocBiLm":
        super().train(mode)
        self._bilm.eval()
        return self

    def get_output_dim(self) -> int:
        return self._output_dim

    @property
    def bilm(self):
        """The wrapped `BidirectionalLanguageModel`."""
        return self._bilm

    def add_sentence_boundaries(
        self, subword_ids: torch.LongTensor, mask: torch.BoolTensor
    ) -> Tuple[torch.LongTensor, torch.BoolTensor]:
        """
        Inserts the biLM's `<S>` before and `</S>` after every sentence, in index space.

        # Parameters

        subword_ids : `torch.LongTensor`
            Shape `(batch_size, timesteps, num_subwords)`, padded on the right with 0.
        mask : `torch.BoolTensor`
            Shape `(batch_size, timesteps)`.

        # Returns

        `(subword_ids, mask)` of shapes `(batch_size, timesteps + 2, max(num_subwords, w))` and
        `(batch_size, timesteps + 2)`, where `w` is the width of the boundary ids.
        """
        batch_size, timesteps, width = subword_ids.shape
        boundary_width = self._boundary_ids.size(1)
        new_width = max(width, boundary_width)
        with_boundaries = subword_ids.new_zeros(batch_size, timesteps + 2, new_width)
        with_boundaries[:, 1 : timesteps + 1, :width] = subword_ids
        rows = torch.arange(batch_size, device=subword_ids.device)
        ends = mask.sum(-1) + 1
        boundary_ids = self._boundary_ids.to(subword_ids.device)
        with_boundaries[:, 0, :boundary_width] = boundary_ids[0]
        with_boundaries[rows, ends] = 0
        with_boundaries[rows, ends, :boundary_width] = boundary_ids[1]
        new_mask = mask.new_zeros(batch_size, timesteps + 2)
        new_mask[:, 0] = True
        new_mask[:, 1 : timesteps + 1] = mask
        new_mask[rows, ends] = True
        return with_boundaries, new_mask

    def forward(
        self, inputs: torch.Tensor, word_inputs: torch.Tensor = None
    ) -> Dict[str, Union[torch.Tensor, List[torch.Tensor]]]:
        """
        # Parameters

        inputs : `torch.Tensor`
            Shape `(batch_size, timesteps, num_subwords)`: the `elmo_tokens` of the
            `elmoc_subwords` indexer (0 is padding; every real token has a non-zero id).
        word_inputs : `torch.Tensor`, optional
            Not supported (ELMo's cached vocabulary); must be `None`.

        # Returns

        A dict with `activations`, a list of `num_layers` tensors of shape
        `(batch_size, timesteps + 2, output_dim)`, and `mask`, `(batch_size, timesteps + 2)`.
        """
        if word_inputs is not None:
            raise ConfigurationError("ELMo-C has no cached vocabulary: word_inputs must be None")
        if inputs.dim() != 3:
            raise ConfigurationError(
                f"ELMo-C expects subword ids of shape (batch_size, timesteps, num_subwords), "
                f"got a tensor of shape {tuple(inputs.shape)}"
            )
        mask = (inputs > 0).any(-1)
        subword_ids, mask_with_boundaries = self.add_sentence_boundaries(inputs, mask)
        tokens = {
            self.archive.input_key: {"subword_ids": subword_ids, "mask": mask_with_boundaries}
        }
        layers, _ = self._bilm.contextual_layers(tokens)
        return {"activations": list(layers.unbind(0)), "mask": mask_with_boundaries}


class ElmocElmo(Elmo):
    """
    ELMo representations from a trained ELMo-C biLM: allennlp's `Elmo`, with `ElmocBiLm` as its
    biLM, so it computes, for each of `num_output_representations` sets of weights,
    `gamma * sum_j softmax(s)_j * h_j` over the layers `h_j` of the biLM (Peters et al. 2018,
    eq. 1), removes the sentence boundaries and applies dropout. It is a drop-in `Elmo` for models
    that take one (e.g. `bcn`'s `elmo` in Python; see `ElmocTokenEmbedder` for configs).

    The input is the `elmo_tokens` tensor of the `elmoc_subwords` indexer.

    # Parameters

    archive_file : `str`
        An ELMo-C biLM `model.tar.gz`.
    num_output_representations : `int`
        How many differently weighted mixes to return (e.g. 2 for ELMo at a model's input and
        output).
    requires_grad : `bool`, optional (default = `False`)
        If `True`, fine-tune the biLM's parameters.
    do_layer_norm : `bool`, optional (default = `False`)
        Layer-normalize every layer before mixing (passed to `ScalarMix`).
    dropout : `float`, optional (default = `0.5`)
        Dropout on the mixed representations.
    keep_sentence_boundaries : `bool`, optional (default = `False`)
        If `True`, the representations of `<S>` and `</S>` are kept.
    scalar_mix_parameters : `List[float]`, optional (default = `None`)
        Fixed (not trained) pre-softmax mixing weights, one per layer: e.g. `[-9e10, -9e10, 1]`
        for the top layer of a 2-layer biLM.
    scalar_mix_l2_penalty : `float`, optional (default = `0.0`)
        `lambda` of the penalty `lambda * ||s||^2` on the pre-softmax mixing weights `s` (ELMo
        paper, section 3.3), which pulls the mix towards the average of the layers. It is
        applied to the gradient of `s` (`2 * lambda * s` is added once per backward pass, however
        often the mix was used in the forward pass), so it is not part of the reported loss;
        allennlp-models' recipes instead put an `l2` `regularizer` on `scalar_parameters` in the
        model, which is equivalent and is reported (use one or the other).
    vectors_path : `str`, optional (default = `None`)
        The biLM's fastText `.bin`, if not where the archive says.
    module : `ElmocBiLm`, optional (default = `None`)
        An already loaded biLM to use instead of loading `archive_file` (which is then ignored).
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
    ) -> None:
        if num_output_representations < 1:
            raise ConfigurationError(
                f"num_output_representations must be at least 1, got {num_output_representations}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ConfigurationError(f"dropout must be in [0, 1), got {dropout}")
        if scalar_mix_l2_penalty < 0:
            raise ConfigurationError(
                f"scalar_mix_l2_penalty must be non-negative, got {scalar_mix_l2_penalty}"
            )
        if scalar_mix_parameters is not None and scalar_mix_l2_penalty > 0:
            raise ConfigurationError(
                "scalar_mix_l2_penalty regularizes trained mixing weights, but "
                "scalar_mix_parameters fixes them: set only one of the two"
            )
        bilm = module
        if bilm is None:
            bilm = ElmocBiLm(archive_file, requires_grad, vectors_path)
        if scalar_mix_parameters is not None and len(scalar_mix_parameters) != bilm.num_layers:
            raise ConfigurationError(
                f"scalar_mix_parameters has {len(scalar_mix_parameters)} weights, but the ELMo-C "
                f"biLM has {bilm.num_layers} layers (the projected input and "
                f"{bilm.num_layers - 1} LSTM layers)"
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
        self.scalar_mix_l2_penalty = scalar_mix_l2_penalty
        if scalar_mix_l2_penalty > 0:
            for scalar_mix in self._scalar_mixes:
                for parameter in scalar_mix.scalar_parameters:
                    parameter.register_hook(self._penalty_hook(parameter, scalar_mix_l2_penalty))

    @staticmethod
    def _penalty_hook(parameter: torch.nn.Parameter, penalty: float):
        def add_penalty_gradient(gradient: torch.Tensor) -> torch.Tensor:
            return gradient + 2.0 * penalty * parameter.detach()

        return add_penalty_gradient

    @property
    def bilm(self) -> ElmocBiLm:
        return self._elmo_lstm

    def get_output_dim(self) -> int:
        return self._elmo_lstm.get_output_dim()


def tokens_to_subword_ids(
    indexer,
    sentences: List[List[str]],
    device: Optional[torch.device] = None,
    max_token_characters: Optional[int] = None,
) -> torch.LongTensor:
    """
    The padded `elmo_tokens` tensor, shape `(batch_size, timesteps, num_subwords)`, of a batch of
    tokenized sentences (the counterpart of allennlp's `batch_to_ids`), from a
    `FastTextSubwordIndexer` such as the `elmoc_subwords` indexer: each token's fastText rows + 1,
    padded with 0. Tokens are first cut to `max_token_characters`, if given.
    """
    limit = max_token_characters
    rows = [
        [indexer.token_subword_ids(token if limit is None else token[:limit]) for token in sentence]
        for sentence in sentences
    ]
    timesteps = max((len(row) for row in rows), default=0)
    width = max((len(ids) for row in rows for ids in row), default=1)
    subword_ids = numpy.zeros((len(rows), timesteps, width), dtype=numpy.int64)
    for row_index, row in enumerate(rows):
        if not row:
            continue
        lengths = numpy.fromiter((len(ids) for ids in row), dtype=numpy.int64, count=len(row))
        filled = numpy.arange(width) < lengths[:, None]
        subword_ids[row_index, : len(row)][filled] = list(itertools.chain.from_iterable(row))
    tensor = torch.from_numpy(subword_ids)
    return tensor if device is None else tensor.to(device)
