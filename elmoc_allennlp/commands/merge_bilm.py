"""
The `elmoc-merge-bilm` subcommand: merges a forward-only and a backward-only ELMo-C run into one
biLM archive (Li et al., 2019, footnote 7; docs/pretraining.md). Also `python -m` this module.
"""

import argparse
import copy
import json
import logging
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.commands.subcommand import PluginSubcommand, check_output
from elmoc_allennlp.common.archives import CONFIG_NAME, ExtractedArchive, read_archive
from elmoc_allennlp.common.atomic_files import atomic_path
from elmoc_allennlp.common.threads import plugin_command
from elmoc_allennlp.common.torch_versions import load_tensors, whole_storage
from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel
from elmoc_allennlp.models.bilm_directions import BACKWARD_OUTPUT_LAYER_PREFIX, OUTPUT_LAYER_PREFIX

logger = logging.getLogger(__name__)

WEIGHTS_NAME = "weights.th"
VOCABULARY_NAME = "vocabulary"


# exist_ok: `python -m elmoc_allennlp.commands.merge_bilm` runs this file as __main__ too.
@Subcommand.register("elmoc-merge-bilm", exist_ok=True)
class MergeBidirectionalLanguageModels(PluginSubcommand):
    """`allennlp elmoc-merge-bilm FORWARD BACKWARD -o OUTPUT`: see `merge_bilm_archives`."""

    description = help = (
        "Merge a forward-only and a backward-only ELMo-C archive (model.directions = "
        "'forward' / 'backward') into one biLM archive."
    )

    def add_own_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("forward_archive", help="model.tar.gz of the forward-only run")
        parser.add_argument("backward_archive", help="model.tar.gz of the backward-only run")
        parser.add_argument(
            "-o", "--output-file", required=True, help="where to write the merged model.tar.gz"
        )
        parser.add_argument(
            "--no-verify",
            action="store_true",
            help="do not load the merged archive to check it (loading needs the fastText file)",
        )

    @staticmethod
    def run(args: argparse.Namespace) -> None:
        path = merge_bilm_archives(
            args.forward_archive,
            args.backward_archive,
            args.output_file,
            verify=not args.no_verify,
            force=args.force,
        )
        print(f"Merged biLM archive written to {path}")


def _first_difference(forward: Any, backward: Any, path: str) -> Optional[Tuple[str, Any, Any]]:
    """The first `(key, forward value, backward value)` that differ in two configs (`None`: none)."""
    if isinstance(forward, dict) and isinstance(backward, dict):
        keys = sorted(set(forward) | set(backward))
        pairs = [
            (f"{path}.{key}", forward.get(key, "<absent>"), backward.get(key, "<absent>"))
            for key in keys
        ]
    elif isinstance(forward, list) and isinstance(backward, list) and len(forward) == len(backward):
        pairs = [
            (f"{path}[{index}]", left, right)
            for index, (left, right) in enumerate(zip(forward, backward))
        ]
    else:
        return None if forward == backward else (path, forward, backward)
    return next(
        filter(None, (_first_difference(left, right, key) for key, left, right in pairs)), None
    )


def _vocabulary_content(directory: Path) -> Dict[str, Any]:
    """A vocabulary folder's files by name; `non_padded_namespaces.txt` as a set (written in set order)."""
    if not directory.is_dir():
        return {}
    content: Dict[str, Any] = {}
    for path in sorted(directory.iterdir()):
        data = path.read_bytes() if path.is_file() else None
        if path.name == "non_padded_namespaces.txt" and data is not None:
            content[path.name] = set(data.decode("utf-8").split())
        else:
            content[path.name] = data
    return content


class _SharedTensors:
    """
    Tensor equality across the runs, reading each pair of storages once and never more values in
    all than the storages hold (a 14 KB archive of many views kept a merge busy for minutes: issue #35).
    """

    def __init__(self, *states: Dict[str, torch.Tensor]) -> None:
        storages = {}
        for state in states:
            for value in state.values():
                address, values = whole_storage(value)
                storages[address] = max(storages.get(address, 0), values.numel())
        self.budget = sum(storages.values())
        self.compared = 0
        self._storages: Dict[Tuple[int, int], bool] = {}

    def equal(self, key: str, forward: torch.Tensor, backward: torch.Tensor) -> bool:
        if forward.shape != backward.shape or forward.dtype != backward.dtype:
            return False
        if forward.numel() == 0:
            return True
        (forward_address, forward_all), (backward_address, backward_all) = (
            whole_storage(forward),
            whole_storage(backward),
        )
        same_view = (forward.storage_offset(), forward.stride()) == (
            backward.storage_offset(),
            backward.stride(),
        )
        if same_view and forward_all.shape == backward_all.shape:
            pair = (forward_address, backward_address)
            if pair not in self._storages:
                self._count(key, forward_all.numel())
                self._storages[pair] = torch.equal(forward_all, backward_all)
            if self._storages[pair]:
                return True
        self._count(key, forward.numel())
        return torch.equal(forward, backward)

    def _count(self, key: str, values: int) -> None:
        self.compared += values
        if self.compared > self.budget:
            raise ConfigurationError(
                f"Parameter {key}: comparing the two runs' shared parameters would read more values "
                f"than their storages hold ({self.budget:,}); their weights.th files view the same "
                "storages in different ways, which torch.save of a trained model does not write"
            )


def merge_bilm_state_dicts(
    forward_state: Dict[str, torch.Tensor],
    backward_state: Dict[str, torch.Tensor],
    forward_name: str = "forward archive",
    backward_name: str = "backward archive",
) -> Dict[str, torch.Tensor]:
    """
    The merged biLM's weights: each direction's from the job that trained it (a single head: the
    backward job's is the backward head); shared tensors must be identical in both runs.
    """
    if set(forward_state) != set(backward_state):
        only = sorted(set(forward_state) ^ set(backward_state))
        raise ConfigurationError(
            f"The {forward_name} and the {backward_name} have different parameters "
            f"(e.g. {only[:3]}); they must be the same architecture"
        )
    trained_by = BidirectionalLanguageModel.parameter_directions(forward_state)
    separate_heads = any(key.startswith(BACKWARD_OUTPUT_LAYER_PREFIX) for key in forward_state)
    shared = _SharedTensors(forward_state, backward_state)
    merged: Dict[str, torch.Tensor] = {}
    for key, forward_value in forward_state.items():
        backward_value = backward_state[key]
        if trained_by[key] == "backward":
            merged[key] = backward_value
        elif not separate_heads and key.startswith(OUTPUT_LAYER_PREFIX):
            merged[key] = forward_value
            merged[BACKWARD_OUTPUT_LAYER_PREFIX + key[len(OUTPUT_LAYER_PREFIX) :]] = backward_value
        elif trained_by[key] is None and not shared.equal(key, forward_value, backward_value):
            raise ConfigurationError(
                f"Parameter {key} differs between the {forward_name} and the {backward_name}: "
                "train both runs with the same config and random_seed / numpy_seed / pytorch_seed"
            )
        else:
            merged[key] = forward_value
    return merged


def _check_runs(forward: ExtractedArchive, backward: ExtractedArchive) -> None:
    """Both runs are single-direction `elmoc_bilm`s with the same model and vocabulary."""
    for extracted, direction in ((forward, "forward"), (backward, "backward")):
        model = extracted.config["model"]
        checks = (
            ("type", model.get("type"), "elmoc_bilm"),
            ("directions", model.get("directions", "both"), direction),
        )
        for key, found, expected in checks:
            if found != expected:
                raise ConfigurationError(
                    f"{extracted.archive}: model.{key} is {found!r}, expected {expected!r}"
                )
    models = [dict(run.config["model"], directions=None) for run in (forward, backward)]
    difference = _first_difference(*models, "model")
    if difference is not None:
        key, left, right = difference
        raise ConfigurationError(
            f"The two runs have different models: {key} is {left!r} in {forward.archive} "
            f"and {right!r} in {backward.archive}"
        )
    vocabularies = [
        _vocabulary_content(run.directory / VOCABULARY_NAME) for run in (forward, backward)
    ]
    if vocabularies[0] != vocabularies[1]:
        raise ConfigurationError(
            f"{forward.archive} and {backward.archive} have different vocabularies"
        )


def _load_weights(extracted: ExtractedArchive) -> Dict[str, torch.Tensor]:
    weights = extracted.member(WEIGHTS_NAME)
    if weights is None:
        raise ConfigurationError(f"Archive {extracted.archive} has no {WEIGHTS_NAME}")
    return load_tensors(str(weights))


def _check_finite(state: Dict[str, torch.Tensor], archive: str) -> None:
    """Refuses NaN and infinite weights (a diverged run), naming the parameter; each storage is read once."""
    finite_storages: Dict[int, bool] = {}
    for key, value in state.items():
        if not (value.is_floating_point() or value.is_complex()) or value.numel() == 0:
            continue
        address, values = whole_storage(value)
        if address not in finite_storages:
            finite_storages[address] = bool(torch.isfinite(values).all())
        if not finite_storages[address] and not bool(torch.isfinite(value).all()):
            count = int((~torch.isfinite(value)).sum())
            raise ConfigurationError(
                f"Parameter {key} of {archive} holds non-finite values ({count:,} of "
                f"{value.numel():,} are NaN or infinite): that run diverged; merge runs whose "
                "weights are finite"
            )


def _write_archive(
    config: Dict[str, Any],
    state: Dict[str, torch.Tensor],
    extras_dir: Path,
    output_file: str,
    check: Optional[Callable[[str], None]] = None,
) -> None:
    """Writes `config`, `state` and `extras_dir`'s vocabulary and meta file, atomically, after `check(written)`."""
    os.makedirs(os.path.dirname(os.path.abspath(output_file)), exist_ok=True)
    with tempfile.TemporaryDirectory() as merged_dir:
        with open(os.path.join(merged_dir, CONFIG_NAME), "w", encoding="utf-8") as config_file:
            json.dump(config, config_file, indent=4)
        torch.save(state, os.path.join(merged_dir, WEIGHTS_NAME))
        members = [(merged_dir, CONFIG_NAME), (merged_dir, WEIGHTS_NAME)]
        members += [(extras_dir, name) for name in (VOCABULARY_NAME, "meta.json")]
        with atomic_path(output_file) as temporary:
            with tarfile.open(temporary, "w:gz") as tar:
                for directory, name in members:
                    if os.path.exists(os.path.join(directory, name)):
                        tar.add(os.path.join(directory, name), arcname=name)
            if check is not None:
                check(temporary)


def _verify(written: str, state: Dict[str, torch.Tensor], output_file: str) -> None:
    """Loads the merged archive `written` (not yet at `output_file`) and compares its weights."""
    from allennlp.models.archival import load_archive

    kept = f"nothing was written at {output_file}"
    try:
        loaded = load_archive(written).model.state_dict()
    except Exception as error:
        raise ConfigurationError(
            f"The merged archive for {output_file} does not load ({type(error).__name__}: "
            f"{error}); {kept}. --no-verify writes it unchecked"
        ) from error
    for key in sorted(set(loaded) | set(state)):
        if key not in loaded or key not in state:
            where = "is missing from" if key not in loaded else "is extra in"
            raise ConfigurationError(
                f"The merged archive for {output_file}: parameter {key} {where} the loaded model; {kept}"
            )
        if not torch.equal(loaded[key], state[key]):
            raise ConfigurationError(
                f"The merged archive for {output_file}: parameter {key} loads with other values "
                f"than were written; {kept}"
            )


def merge_bilm_archives(
    forward_archive: str,
    backward_archive: str,
    output_file: str,
    verify: bool = True,
    force: bool = False,
) -> str:
    """
    Merges a forward-only and a backward-only `elmoc_bilm` run (same config and seeds) into one biLM
    archive, and returns its path.

    # Parameters

    forward_archive : `str`
        The forward-only run's `model.tar.gz`.
    backward_archive : `str`
        The backward-only run's `model.tar.gz`.
    output_file : `str`
        Where to write the merged archive (atomically), or a folder for its `model.tar.gz`.
    verify : `bool`, optional (default = `True`)
        Load the merged archive (needs its fastText file) and compare its weights before it is put in place.
    force : `bool`, optional (default = `False`)
        Replace an existing `output_file`.
    """
    output_file = os.fspath(output_file)
    if os.path.isdir(output_file):
        output_file = os.path.join(output_file, "model.tar.gz")
    inputs = [("the forward archive", forward_archive), ("the backward archive", backward_archive)]
    check_output(output_file, force, inputs)
    forward, backward = read_archive(forward_archive), read_archive(backward_archive)
    _check_runs(forward, backward)
    forward_state, backward_state = _load_weights(forward), _load_weights(backward)
    _check_finite(forward_state, forward_archive)
    _check_finite(backward_state, backward_archive)
    state = merge_bilm_state_dicts(forward_state, backward_state, forward_archive, backward_archive)
    config = copy.deepcopy(forward.config)
    config.pop("distributed", None)
    model = config["model"]
    model.pop("directions", None)
    model.setdefault("backward_output_layer", copy.deepcopy(model["output_layer"]))
    check = (lambda written: _verify(written, state, output_file)) if verify else None
    _write_archive(config, state, forward.directory, output_file, check)
    logger.info("Merged %s and %s into %s", forward_archive, backward_archive, output_file)
    return output_file


def main(argv: Optional[List[str]] = None) -> None:
    """`python -m elmoc_allennlp.commands.merge_bilm FORWARD BACKWARD -o OUTPUT`."""
    # What the verification loads besides the model: the reader, indexers and token embedders.
    import elmoc_allennlp.data  # noqa: F401
    import elmoc_allennlp.modules  # noqa: F401

    command = MergeBidirectionalLanguageModels()
    parser = argparse.ArgumentParser(
        prog="python -m elmoc_allennlp.commands.merge_bilm", description=command.help
    )
    command.add_arguments(parser)
    plugin_command(command.run_command)(parser.parse_args(argv))


if __name__ == "__main__":
    main()
