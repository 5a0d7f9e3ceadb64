"""
The `elmoc-merge-bilm` subcommand: merges a forward-only and a backward-only ELMo-C run into one
biLM archive (Li et al., 2019, footnote 7: the two directions are trained as separate jobs on
separate devices).

    allennlp elmoc-merge-bilm runs/forward/model.tar.gz runs/backward/model.tar.gz \\
        -o runs/bilm.tar.gz --include-package elmoc_allennlp

or, without the `allennlp` plugin machinery,

    python -m elmoc_allennlp.commands.merge_bilm FORWARD BACKWARD -o OUTPUT
"""
import argparse
import copy
import json
import logging
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives import ExtractedArchive, read_archive
from elmoc_allennlp.common.atomic_files import atomic_path
from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "weights.th"
META_NAME = "meta.json"
VOCABULARY_NAME = "vocabulary"

_HEAD_PREFIX = "_output_layer."
_BACKWARD_HEAD_PREFIX = "_backward_output_layer."

# exist_ok: `python -m elmoc_allennlp.commands.merge_bilm` runs this file as __main__ too.
@Subcommand.register("elmoc-merge-bilm", exist_ok=True)
class MergeBidirectionalLanguageModels(Subcommand):
    """
    `allennlp elmoc-merge-bilm FORWARD BACKWARD -o OUTPUT`: see `merge_bilm_archives`.
    """

    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Merge a forward-only and a backward-only ELMo-C archive (model.directions = "
            "'forward' / 'backward') into one biLM archive."
        )
        subparser = parser.add_parser(self.name, description=description, help=description)
        _add_arguments(subparser)
        subparser.set_defaults(func=_run)
        return subparser


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("forward_archive", help="model.tar.gz of the forward-only run")
    parser.add_argument("backward_archive", help="model.tar.gz of the backward-only run")
    parser.add_argument(
        "-o", "--output-file", required=True, help="where to write the merged model.tar.gz"
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite an existing output file"
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="do not load the merged archive to check it (loading needs the fastText file)",
    )


def _run(args: argparse.Namespace) -> None:
    path = merge_bilm_archives(
        args.forward_archive,
        args.backward_archive,
        args.output_file,
        verify=not args.no_verify,
        force=args.force,
    )
    print(f"Merged biLM archive written to {path}")


def _first_difference(
    forward: Any, backward: Any, path: str
) -> Optional[Tuple[str, Any, Any]]:
    if isinstance(forward, dict) and isinstance(backward, dict):
        for key in sorted(set(forward) | set(backward)):
            found = _first_difference(
                forward.get(key, "<absent>"), backward.get(key, "<absent>"), f"{path}.{key}"
            )
            if found is not None:
                return found
        return None
    if isinstance(forward, list) and isinstance(backward, list) and len(forward) == len(backward):
        for index, (left, right) in enumerate(zip(forward, backward)):
            found = _first_difference(left, right, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    return None if forward == backward else (path, forward, backward)


def _vocabulary_content(directory: Path) -> Dict[str, Any]:
    """A vocabulary folder's files by name; `non_padded_namespaces.txt` as a set (allennlp
    writes it in set order, which differs between processes)."""
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


def merge_bilm_state_dicts(
    forward_state: Dict[str, torch.Tensor],
    backward_state: Dict[str, torch.Tensor],
    forward_name: str = "forward archive",
    backward_name: str = "backward archive",
) -> Dict[str, torch.Tensor]:
    """
    The weights of the merged biLM: each direction's LSTM stack, input projection and LayerNorm
    (if the contextualizer has one per direction) and output layer from the job that trained
    that direction. Models with a single output layer (written before `backward_output_layer`
    was used in single-direction jobs) give the backward job's `_output_layer` as the merged
    `_backward_output_layer`. Every other tensor (frozen in both jobs, e.g. a shared input
    projection) must be identical in both runs.
    """
    if set(forward_state) != set(backward_state):
        only = sorted(set(forward_state) ^ set(backward_state))
        raise ConfigurationError(
            f"The {forward_name} and the {backward_name} have different parameters "
            f"(e.g. {only[:3]}); they must be the same architecture"
        )
    trained_by = BidirectionalLanguageModel.parameter_directions(forward_state)
    separate_heads = any(key.startswith(_BACKWARD_HEAD_PREFIX) for key in forward_state)
    merged: Dict[str, torch.Tensor] = {}
    for key, forward_value in forward_state.items():
        backward_value = backward_state[key]
        direction = trained_by[key]
        if direction == "forward":
            merged[key] = forward_value
        elif direction == "backward":
            merged[key] = backward_value
        elif not separate_heads and key.startswith(_HEAD_PREFIX):
            merged[key] = forward_value
            merged[_BACKWARD_HEAD_PREFIX + key[len(_HEAD_PREFIX) :]] = backward_value
        elif forward_value.shape != backward_value.shape or not torch.equal(
            forward_value, backward_value
        ):
            raise ConfigurationError(
                f"Parameter {key} differs between the {forward_name} and the {backward_name}. "
                "It is frozen in single-direction runs, so it differs only if the two runs did "
                "not start from the same initialisation: use the same config and the same "
                "random_seed / numpy_seed / pytorch_seed for both"
            )
        else:
            merged[key] = forward_value
    return merged


def _read_run_config(extracted: ExtractedArchive, archive: str, direction: str) -> Dict[str, Any]:
    """The config of a single-direction `elmoc_bilm` run, checked."""
    config = extracted.config
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    if model.get("type") != "elmoc_bilm":
        raise ConfigurationError(
            f"{archive}: model.type is {model.get('type')!r}, expected 'elmoc_bilm'"
        )
    if model.get("directions", "both") != direction:
        raise ConfigurationError(
            f"{archive}: model.directions is {model.get('directions', 'both')!r}, "
            f"expected {direction!r} (train it with directions: '{direction}')"
        )
    return config


def _check_same_model(
    forward_config: Dict[str, Any],
    backward_config: Dict[str, Any],
    forward_dir: Path,
    backward_dir: Path,
    forward_archive: str,
    backward_archive: str,
) -> None:
    """The two runs have the same model (but for `directions`) and the same vocabulary."""
    forward_model = {k: v for k, v in forward_config["model"].items() if k != "directions"}
    backward_model = {k: v for k, v in backward_config["model"].items() if k != "directions"}
    difference = _first_difference(forward_model, backward_model, "model")
    if difference is not None:
        key, left, right = difference
        raise ConfigurationError(
            f"The two runs have different models: {key} is {left!r} in {forward_archive} "
            f"and {right!r} in {backward_archive}"
        )
    if _vocabulary_content(forward_dir / VOCABULARY_NAME) != _vocabulary_content(
        backward_dir / VOCABULARY_NAME
    ):
        raise ConfigurationError(
            f"{forward_archive} and {backward_archive} have different vocabularies"
        )


def _merged_config(forward_config: Dict[str, Any]) -> Dict[str, Any]:
    """The forward run's config as a biLM: no `directions`, no `distributed`, two heads."""
    config = copy.deepcopy(forward_config)
    config.pop("distributed", None)
    model = config["model"]
    model.pop("directions", None)
    model.setdefault("backward_output_layer", copy.deepcopy(model["output_layer"]))
    return config


def _write_archive(
    config: Dict[str, Any], state: Dict[str, torch.Tensor], extras_dir: Path, output_file: str
) -> str:
    """Writes `config`, `state` and the vocabulary and meta file of `extras_dir`, atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(output_file)), exist_ok=True)
    with tempfile.TemporaryDirectory() as merged_dir:
        with open(os.path.join(merged_dir, CONFIG_NAME), "w", encoding="utf-8") as config_file:
            json.dump(config, config_file, indent=4)
        torch.save(state, os.path.join(merged_dir, WEIGHTS_NAME))
        members = [(os.path.join(merged_dir, CONFIG_NAME), CONFIG_NAME)]
        members.append((os.path.join(merged_dir, WEIGHTS_NAME), WEIGHTS_NAME))
        for name in (VOCABULARY_NAME, META_NAME):
            if os.path.exists(os.path.join(extras_dir, name)):
                members.append((os.path.join(extras_dir, name), name))
        with atomic_path(output_file) as temporary:
            with tarfile.open(temporary, "w:gz") as tar:
                for path, name in members:
                    tar.add(path, arcname=name)
    return output_file


def _verify_archive(output_file: str, state: Dict[str, torch.Tensor]) -> None:
    """The archive loads (which needs its fastText file) with exactly `state` as weights."""
    from allennlp.models.archival import load_archive

    loaded = load_archive(output_file).model.state_dict()
    if set(loaded) != set(state) or not all(torch.equal(loaded[key], state[key]) for key in state):
        raise ConfigurationError(f"The merged archive {output_file} does not load as written")


def merge_bilm_archives(
    forward_archive: str,
    backward_archive: str,
    output_file: str,
    verify: bool = True,
    force: bool = False,
) -> str:
    """
    Merges the archives of a forward-only and a backward-only `elmoc_bilm` run (the same config
    and seeds, with `model.directions` set to `"forward"` and `"backward"`) into one biLM
    archive whose forward and backward language models are exactly the two runs' (see
    `merge_bilm_state_dicts`). The merged config is the forward run's with `directions`
    removed and a `backward_output_layer` (added if the runs had none). The archive is written
    atomically; an existing `output_file` (an input too) only with `force`. With `verify` the
    merged archive is loaded (which needs the fastText file of
    the config) and its weights compared with the inputs.

    # Returns

    The path of the merged archive.
    """
    output_file = os.fspath(output_file)
    if os.path.isdir(output_file):
        output_file = os.path.join(output_file, "model.tar.gz")
    if os.path.exists(output_file) and not force:
        raise ConfigurationError(
            f"{output_file} (--output-file) exists; give --force to overwrite it"
        )
    forward, backward = read_archive(forward_archive), read_archive(backward_archive)
    merged_state = _merge(forward, backward, forward_archive, backward_archive, output_file)
    if verify:
        _verify_archive(output_file, merged_state)
    logger.info("Merged %s and %s into %s", forward_archive, backward_archive, output_file)
    return output_file


def _merge(
    forward: ExtractedArchive,
    backward: ExtractedArchive,
    forward_archive: str,
    backward_archive: str,
    output_file: str,
) -> Dict[str, torch.Tensor]:
    forward_config = _read_run_config(forward, forward_archive, "forward")
    backward_config = _read_run_config(backward, backward_archive, "backward")
    _check_same_model(
        forward_config, backward_config, forward.directory, backward.directory,
        forward_archive, backward_archive,
    )
    from elmoc_allennlp.common.torch_versions import load_tensors

    states = []
    for extracted, name in ((forward, forward_archive), (backward, backward_archive)):
        weights = extracted.member(WEIGHTS_NAME)
        if weights is None:
            raise ConfigurationError(f"Archive {name} has no {WEIGHTS_NAME}")
        states.append(load_tensors(str(weights)))
    merged_state = merge_bilm_state_dicts(*states, forward_archive, backward_archive)
    _write_archive(_merged_config(forward_config), merged_state, forward.directory, output_file)
    return merged_state


def main(argv: Optional[List[str]] = None) -> None:
    """`python -m elmoc_allennlp.commands.merge_bilm FORWARD BACKWARD -o OUTPUT`."""
    import elmoc_allennlp  # noqa: F401  (registers the model for verification)

    parser = argparse.ArgumentParser(
        prog="python -m elmoc_allennlp.commands.merge_bilm",
        description=MergeBidirectionalLanguageModels.__doc__,
    )
    _add_arguments(parser)
    _run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
