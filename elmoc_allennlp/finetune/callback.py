"""`elmoc_finetune`: checks a fine-tuning run's indexing, and makes its archive an ordinary biLM archive."""

import copy
import json
import logging
import os
from typing import Any, Dict, Optional

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import CONFIG_NAME
from allennlp.training.callbacks.callback import TrainerCallback

from elmoc_allennlp.common.atomic_files import atomic_write
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.downstream.archive import BilmArchive
from elmoc_allennlp.downstream.input_kinds import registered_as
from elmoc_allennlp.finetune.archive_fasttext import (
    archive_with_its_fasttext,
    different_fasttext_error,
    same_fasttext_model,
)

logger = logging.getLogger(__name__)

# The run's original config, kept next to the rewritten config.json.
FINETUNE_CONFIG_NAME = "config_finetune.json"
ARCHIVE_INDEXER_TYPE = "elmoc_archive_fasttext"


def self_contained_config(finetune_config: Dict[str, Any], archive: BilmArchive) -> Dict[str, Any]:
    """The run's config as a biLM config: the archive's `model` and indexer, the fastText files used."""
    base = archive.resolved_config()
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
    For `elmoc_bilm_from_archive`: at the start, checks that every data loader's reader indexes as in
    pretraining; after a successful run, rewrites `config.json` as a self-contained `elmoc_bilm` config,
    keeping the original as `config_finetune.json` (a finished run cannot be resumed with `--recover`).

    Registered as a `TrainerCallback` with name "elmoc_finetune".

    # Parameters

    serialization_dir : `str`
        The run's folder (given by the trainer, not in the config), whose `config.json` is read at
        the start and rewritten after a successful run.
    """

    def __init__(self, serialization_dir: str) -> None:
        super().__init__(serialization_dir)
        self._archive: Optional[BilmArchive] = None

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        from allennlp.models import Model

        with open(os.path.join(self.serialization_dir, CONFIG_NAME), encoding="utf-8") as handle:
            model = json.load(handle).get("model", {})
        if not registered_as(Model, model.get("type"), "elmoc_bilm_from_archive"):
            raise ConfigurationError(
                "model.type must be 'elmoc_bilm_from_archive' with the 'elmoc_finetune' callback"
            )
        archive = archive_with_its_fasttext(
            model["archive_file"], model.get("vectors_path"), "model.vectors_path"
        )
        self._archive = archive
        # allennlp's trainer has no public accessor of its validation data loader.
        loaders = [("dataset_reader", trainer.data_loader)]
        validation_loader = getattr(trainer, "_validation_data_loader", None)
        if validation_loader is not None:
            loaders.append(("validation_dataset_reader", validation_loader))
        for config_key, loader in loaders:
            reader = getattr(loader, "reader", None)
            if reader is None:
                logger.warning("elmoc_finetune: cannot check the reader of %s", config_key)
                continue
            self._check_reader(reader, config_key, archive)

    def _check_reader(self, reader, config_key: str, archive: BilmArchive) -> None:
        # allennlp's DatasetReader has no public accessor of its token indexers.
        key = archive.input_key
        indexers = getattr(reader, "_token_indexers", {}) or {}
        indexer = indexers.get(key)
        where = f"{config_key}.token_indexers.{key}"
        if not isinstance(indexer, FastTextSubwordIndexer):
            raise ConfigurationError(
                f"{where} must index with the fastText model of {archive.archive_file} (type "
                f"'{ARCHIVE_INDEXER_TYPE}'), got {type(indexer).__name__}"
            )
        if not same_fasttext_model(indexer.vectors.path, archive.input_vectors_path):
            raise different_fasttext_error(
                archive.archive_file,
                archive.input_vectors_path,
                str(indexer.vectors.path),
                f"{where}.vectors_path",
            )
        checks = [
            (f"{where}.lowercase_tokens", indexer.lowercase_tokens, archive.lowercase_tokens),
            (f"{where}.boundary_tokens", indexer.boundary_tokens, list(archive.boundary_tokens)),
        ]
        for option in ("start_token", "end_token", "max_token_characters"):
            expected = getattr(archive, option)
            # Checked only with a reader that has the option (`elmoc_lm_corpus`).
            checks.append((f"{config_key}.{option}", getattr(reader, option, expected), expected))
        for option, actual, expected in checks:
            if actual != expected:
                raise ConfigurationError(
                    f"{option} is {actual!r}, the biLM of {archive.archive_file} was pretrained with {expected!r}"
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
        logger.info("Wrote a self-contained biLM config to %s", config_path)
