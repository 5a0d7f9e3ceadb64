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
import filecmp
import json
import logging
import os
import tarfile
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import torch

from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives import extract_archive
from elmoc_allennlp.common.atomic_files import atomic_path

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "weights.th"
META_NAME = "meta.json"
VOCABULARY_NAME = "vocabulary"

_FORWARD_PREFIX = "_contextualizer.forward_layers."
_BACKWARD_PREFIX = "_contextualizer.backward_layers."
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
        "--no-verify",
        action="store_true",
        help="do not load the merged archive to check it (loading needs the fastText file)",
    )


def _run(args: argparse.Namespace) -> None:
    path = merge_bilm_archives(
        args.forward_archive, args.backward_archive, args.output_file, verify=not args.no_verify
    )
    print(f"Merged biLM archive written to {path}")


def _extract(archive: str, directory: str) -> None:
    if not os.path.isfile(archive):
        raise ConfigurationError(f"Archive {archive} does not exist")
    extract_archive(archive, directory)  # refuses unsafe members and damaged archives
    for required in (CONFIG_NAME, WEIGHTS_NAME):
        if not os.path.exists(os.path.join(directory, required)):
            raise ConfigurationError(f"Archive {archive} has no {required}")


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


def _same_directory(left: str, right: str) -> bool:
    if os.path.isdir(left) != os.path.isdir(right):
        return False
    if not os.path.isdir(left):
        return True
    comparison = filecmp.dircmp(left, right)
    if comparison.left_only or comparison.right_only or comparison.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(left, right, comparison.common_files, shallow=False)
    return not mismatch and not errors and all(
        _same_directory(os.path.join(left, d), os.path.join(right, d))
        for d in comparison.common_dirs
    )


def merge_bilm_state_dicts(
    forward_state: Dict[str, torch.Tensor],
    backward_state: Dict[str, torch.Tensor],
    forward_name: str = "forward archive",
    backward_name: str = "backward archive",
) -> Dict[str, torch.Tensor]:
    """
    The weights of the merged biLM: the forward stack and the (shared) output layer from the
    forward run, the backward stack from the backward run, the backward run's output layer as
    `_backward_output_layer`. Every other tensor (the frozen input projection) must be identical
    in both runs.
    """
    if set(forward_state) != set(backward_state):
        only = sorted(set(forward_state) ^ set(backward_state))
        raise ConfigurationError(
            f"The {forward_name} and the {backward_name} have different parameters "
            f"(e.g. {only[:3]}); they must be the same architecture"
        )
    if any(key.startswith(_BACKWARD_HEAD_PREFIX) for key in forward_state):
        raise ConfigurationError(
            f"The {forward_name} already has a backward_output_layer: is it a merged archive?"
        )
    merged: Dict[str, torch.Tensor] = {}
    for key, forward_value in forward_state.items():
        backward_value = backward_state[key]
        if key.startswith(_FORWARD_PREFIX):
            merged[key] = forward_value
        elif key.startswith(_BACKWARD_PREFIX):
            merged[key] = backward_value
        elif key.startswith(_HEAD_PREFIX):
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


def merge_bilm_archives(
    forward_archive: str,
    backward_archive: str,
    output_file: str,
    verify: bool = True,
) -> str:
    """
    Merges the archives of a forward-only and a backward-only `elmoc_bilm` run (the same config
    and seeds, with `model.directions` set to `"forward"` and `"backward"`) into one biLM
    archive whose forward and backward language models are exactly the two runs' (see
    `merge_bilm_state_dicts`). The merged config is the forward run's with `directions`
    removed and `backward_output_layer` added. The archive is written atomically. With `verify`
    the merged archive is loaded (which needs the fastText file of the config) and its weights
    compared with the inputs.

    # Returns

    The path of the merged archive.
    """
    with tempfile.TemporaryDirectory() as workspace:
        forward_dir = os.path.join(workspace, "forward")
        backward_dir = os.path.join(workspace, "backward")
        _extract(forward_archive, forward_dir)
        _extract(backward_archive, backward_dir)
        configs = []
        for directory, archive, expected in (
            (forward_dir, forward_archive, "forward"),
            (backward_dir, backward_archive, "backward"),
        ):
            with open(os.path.join(directory, CONFIG_NAME), encoding="utf-8") as config_file:
                config = json.load(config_file)
            model = config.get("model", {})
            if model.get("type") != "elmoc_bilm":
                raise ConfigurationError(
                    f"{archive}: model.type is {model.get('type')!r}, expected 'elmoc_bilm'"
                )
            if model.get("directions", "both") != expected:
                raise ConfigurationError(
                    f"{archive}: model.directions is {model.get('directions', 'both')!r}, "
                    f"expected {expected!r} (train it with directions: '{expected}')"
                )
            configs.append(config)
        forward_config, backward_config = configs
        forward_model = {k: v for k, v in forward_config["model"].items() if k != "directions"}
        backward_model = {k: v for k, v in backward_config["model"].items() if k != "directions"}
        difference = _first_difference(forward_model, backward_model, "model")
        if difference is not None:
            key, left, right = difference
            raise ConfigurationError(
                f"The two runs have different models: {key} is {left!r} in {forward_archive} "
                f"and {right!r} in {backward_archive}"
            )
        if not _same_directory(
            os.path.join(forward_dir, VOCABULARY_NAME), os.path.join(backward_dir, VOCABULARY_NAME)
        ):
            raise ConfigurationError(
                f"{forward_archive} and {backward_archive} have different vocabularies"
            )

        forward_state = torch.load(os.path.join(forward_dir, WEIGHTS_NAME), map_location="cpu")
        backward_state = torch.load(os.path.join(backward_dir, WEIGHTS_NAME), map_location="cpu")
        merged_state = merge_bilm_state_dicts(
            forward_state, backward_state, forward_archive, backward_archive
        )

        merged_config = copy.deepcopy(forward_config)
        merged_config.pop("distributed", None)
        merged_config["model"].pop("directions", None)
        merged_config["model"]["backward_output_layer"] = copy.deepcopy(
            merged_config["model"]["output_layer"]
        )
        merged_dir = os.path.join(workspace, "merged")
        os.makedirs(merged_dir)
        with open(os.path.join(merged_dir, CONFIG_NAME), "w", encoding="utf-8") as config_file:
            json.dump(merged_config, config_file, indent=4)
        torch.save(merged_state, os.path.join(merged_dir, WEIGHTS_NAME))
        members: List[str] = [CONFIG_NAME, WEIGHTS_NAME]
        for name in (VOCABULARY_NAME, META_NAME):
            if os.path.exists(os.path.join(forward_dir, name)):
                os.rename(os.path.join(forward_dir, name), os.path.join(merged_dir, name))
                members.append(name)

        output_file = os.fspath(output_file)
        if os.path.isdir(output_file):
            output_file = os.path.join(output_file, "model.tar.gz")
        os.makedirs(os.path.dirname(os.path.abspath(output_file)), exist_ok=True)
        with atomic_path(output_file) as temporary:
            with tarfile.open(temporary, "w:gz") as tar:
                for name in members:
                    tar.add(os.path.join(merged_dir, name), arcname=name)

    if verify:
        from allennlp.models.archival import load_archive

        loaded = load_archive(output_file).model.state_dict()
        if set(loaded) != set(merged_state) or not all(
            torch.equal(loaded[key], merged_state[key]) for key in merged_state
        ):
            raise ConfigurationError(f"The merged archive {output_file} does not load as written")
    logger.info("Merged %s and %s into %s", forward_archive, backward_archive, output_file)
    return output_file


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
