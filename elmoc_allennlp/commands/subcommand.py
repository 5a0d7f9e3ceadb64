"""The base of the plugin's subcommands (found through `.allennlp_plugins`), and their output check."""

import argparse
from pathlib import Path
from typing import Optional, Sequence, Tuple

from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.atomic_files import same_file
from elmoc_allennlp.common.threads import add_threads_argument, plugin_command, set_threads


class PluginSubcommand(Subcommand):
    """
    A subcommand from its `description`, `help`, `add_own_arguments` and `run`; with `--force` and
    `--threads`.
    """

    description = ""
    help = ""

    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        subparser = parser.add_parser(self.name, description=self.description, help=self.help)
        self.add_arguments(subparser)
        subparser.set_defaults(func=plugin_command(self.run_command))
        return subparser

    def run_command(self, args: argparse.Namespace) -> None:
        """`run` with the threads `--threads` asks for."""
        set_threads(args.threads)
        self.run(args)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        self.add_own_arguments(parser)
        parser.add_argument(
            "--force", action="store_true", help="replace the output file if it exists"
        )
        add_threads_argument(parser)

    def add_own_arguments(self, parser: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    @staticmethod
    def run(args: argparse.Namespace) -> None:
        raise NotImplementedError


def check_output(
    output_file: str, force: bool, inputs: Sequence[Tuple[str, Optional[str]]]
) -> Path:
    """
    The output's path, if writing it loses nothing: not a folder, none of `inputs` `(what, path)`,
    new or forced.
    """
    output_path = Path(output_file)
    if output_path.is_dir():
        raise ConfigurationError(f"output file {output_file} is a directory")
    for what, path in inputs:
        if path is not None and same_file(output_path, path):
            raise ConfigurationError(
                f"output file {output_file} is {what} {path}: choose another output file "
                "(--force replaces outputs, never the files the run reads)"
            )
    if output_path.exists() and not force:
        raise ConfigurationError(f"output file {output_file} exists; pass --force to replace it")
    return output_path
