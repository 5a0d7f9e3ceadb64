import copy
import json
import logging
import os
from typing import Any, Dict, Optional

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import CONFIG_NAME
from allennlp.training.callbacks.callback import TrainerCallback

from elmoc_allennlp.common.atomic_files import atomic_write
from elmoc_allennlp.common.config_keys import set_dotted
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.common.elmoc_archive import (
    ElmocArchive,
    different_fasttext_error,
    same_fasttext_model,
)
from elmoc_allennlp.models.bilm_from_archive import FINETUNED_FROM_ATTRIBUTE

logger = logging.getLogger(__name__)

# The run's original config, kept next to the rewritten config.json (and put into the archive by
# the fine-tuning config's `include_in_archive`).
FINETUNE_CONFIG_NAME = "config_finetune.json"
ARCHIVE_INDEXER_TYPE = "elmoc_archive_fasttext"


def self_contained_config(
    finetune_config: Dict[str, Any], archive: ElmocArchive
) -> Dict[str, Any]:
    """
    The config of a fine-tuning run (`elmoc_bilm_from_archive` model, `elmoc_archive_fasttext`
    indexers) as an ordinary biLM config: `model` is the base archive's, `elmoc_archive_fasttext`
    indexers become the archive's own `elmoc_fasttext_subwords` indexer, and every fastText path is the
    file the run used. Everything else (data, trainer) stays as it was run.
    """
    base = copy.deepcopy(archive.config)
    for dotted_key, path in archive.vectors_overrides.items():
        set_dotted(base, dotted_key, path)
    config = copy.deepcopy(finetune_config)
    config["model"] = base["model"]
    pretraining_indexer = base["dataset_reader"]["token_indexers"][archive.input_key]
    for reader_key in ("dataset_reader", "validation_dataset_reader"):
        indexers = config.get(reader_key, {}).get("token_indexers", {})
        for key, indexer in indexers.items():
            if isinstance(indexer, dict) and indexer.get("type") == ARCHIVE_INDEXER_TYPE:
                indexers[key] = copy.deepcopy(pretraining_indexer)
    return config


@TrainerCallback.register("elmoc_finetune")
class FineTuneCallback(TrainerCallback):
    """
    Makes a fine-tuning run of a biLM archive (`elmoc_bilm_from_archive`) safe and its result an
    ordinary biLM archive.

    * **At the start** it checks that the data is indexed as the biLM was pretrained: every data
      loader's reader indexes the biLM's input (`dataset_reader.token_indexers.<key>`) with the
      archive's own fastText model (the same file or a copy: a different model is refused with a
      `ConfigurationError`), the same lowercasing and the same sentence boundaries. The
      `elmoc_archive_fasttext` indexer does so by construction; a hand-written
      `elmoc_fasttext_subwords` indexer is checked. With `gradual_unfreezing`, a warning names the
      layers that `num_epochs` leaves untrained.
    * **At the end of a successful run** it rewrites the run's `config.json`, which `allennlp
      train` then packs into `model.tar.gz`, as a self-contained `elmoc_bilm` config (see
      `self_contained_config`): the new archive does not need the base archive and works with
      `elmoc_token_embedder`, `ElmocEmbedder`, `allennlp elmoc-embed`, `allennlp evaluate` and as
      the base of another fine-tuning run. The original config is kept as `config_finetune.json`
      (list it in `include_in_archive` to keep it in the archive too). Because `config.json`
      changes, a finished run cannot be resumed with `--recover` (an interrupted one can).

    Registered as a `TrainerCallback` with name "elmoc_finetune".

    # Parameters

    serialization_dir : `str`
        Given by the trainer.
    """

    def __init__(self, serialization_dir: str) -> None:
        super().__init__(serialization_dir)
        self._archive: Optional[ElmocArchive] = None

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        archive = getattr(trainer.model, FINETUNED_FROM_ATTRIBUTE, None)
        if archive is None:
            raise ConfigurationError(
                "The 'elmoc_finetune' callback fine-tunes a biLM archive: model.type must be "
                "'elmoc_bilm_from_archive'"
            )
        self._archive = archive
        loaders = [("dataset_reader", trainer.data_loader)]
        validation_loader = getattr(trainer, "_validation_data_loader", None)
        if validation_loader is not None:
            loaders.append(("validation_dataset_reader", validation_loader))
        for config_key, loader in loaders:
            reader = getattr(loader, "reader", None)
            if reader is None:
                logger.warning(
                    "elmoc_finetune: cannot see the reader of the %s data loader (%s) to check its "
                    "fastText indexer",
                    config_key,
                    type(loader).__name__,
                )
                continue
            self._check_reader(reader, config_key, archive)
        self._warn_about_untrained_layers(trainer)

    def _check_reader(self, reader, config_key: str, archive: ElmocArchive) -> None:
        key = archive.input_key
        indexers = getattr(reader, "_token_indexers", {}) or {}
        indexer = indexers.get(key)
        where = f"{config_key}.token_indexers.{key}"
        if not isinstance(indexer, FastTextSubwordIndexer):
            raise ConfigurationError(
                f"{where}: the biLM of {archive.archive_file} reads its input from the indexer "
                f"'{key}', which must index with the archive's fastText model (type "
                f"'{ARCHIVE_INDEXER_TYPE}'); the reader's indexers are "
                f"{ {name: type(value).__name__ for name, value in indexers.items()} }"
            )
        if not same_fasttext_model(indexer.vectors.path, archive.input_vectors_path):
            raise different_fasttext_error(
                archive.archive_file,
                archive.input_vectors_path,
                str(indexer.vectors.path),
                f"{where}.vectors_path",
            )
        if indexer.lowercase_tokens != archive.lowercase_tokens:
            raise ConfigurationError(
                f"{where}.lowercase_tokens is {indexer.lowercase_tokens}, but the biLM of "
                f"{archive.archive_file} was pretrained with lowercase_tokens = "
                f"{archive.lowercase_tokens}"
            )
        if indexer.boundary_tokens != list(archive.boundary_tokens):
            raise ConfigurationError(
                f"{where}.boundary_tokens are {indexer.boundary_tokens}, but the biLM of "
                f"{archive.archive_file} was pretrained with {archive.boundary_tokens}"
            )
        for option, expected in (
            ("start_token", archive.start_token),
            ("end_token", archive.end_token),
            ("max_token_characters", archive.max_token_characters),
        ):
            if not hasattr(reader, f"_{option}"):
                continue
            actual = getattr(reader, f"_{option}")
            if actual != expected:
                raise ConfigurationError(
                    f"{config_key}.{option} is {actual!r}, but the biLM of "
                    f"{archive.archive_file} was pretrained with {expected!r}"
                )

    def _warn_about_untrained_layers(self, trainer) -> None:
        scheduler = getattr(trainer, "_learning_rate_scheduler", None)
        if not getattr(scheduler, "gradual_unfreezing", False):
            return
        num_groups = len(trainer.optimizer.param_groups) - 1
        num_epochs = getattr(trainer, "_num_epochs", None)
        if num_epochs is not None and num_epochs < num_groups:
            logger.warning(
                "Gradual unfreezing trains the top group in epoch 1, the top two in epoch 2, ...: "
                "with %d parameter groups and num_epochs = %d, the bottom %d group(s) are never "
                "trained",
                num_groups,
                num_epochs,
                num_groups - num_epochs,
            )

    def on_end(
        self,
        trainer,
        metrics: Dict[str, Any] = None,
        epoch: int = None,
        is_primary: bool = True,
        **kwargs,
    ) -> None:
        # `metrics` is None when training raised.
        if not is_primary or metrics is None or self._archive is None:
            return
        config_path = os.path.join(self.serialization_dir, CONFIG_NAME)
        with open(config_path, encoding="utf-8") as handle:
            finetune_config = json.load(handle)
        if finetune_config.get("model", {}).get("type") == "elmoc_bilm":
            return  # already rewritten
        config = self_contained_config(finetune_config, self._archive)
        with atomic_write(os.path.join(self.serialization_dir, FINETUNE_CONFIG_NAME), "w") as out:
            json.dump(finetune_config, out, indent=4)
        with atomic_write(config_path, "w") as out:
            json.dump(config, out, indent=4)
        logger.info(
            "Wrote a self-contained biLM config to %s (the fine-tuning config is %s)",
            config_path,
            FINETUNE_CONFIG_NAME,
        )

