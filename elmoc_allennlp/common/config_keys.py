"""
Config keys: naming the config key of a biLM archive in the errors of the components that read
one, and setting a value in a config dict by its dotted key.
"""
import contextlib
from typing import Any, Dict, Iterator

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError


@contextlib.contextmanager
def naming_the_config_key(params: Params) -> Iterator[None]:
    """
    Builds a component from `params`, turning "(archive_file)" in its `ConfigurationError`s into
    the full config key (e.g. `model.text_field_embedder.token_embedders.elmo.archive_file`).
    """
    history = params.history
    try:
        yield
    except ConfigurationError as error:
        message = str(error)
        if not history or "(archive_file)" not in message or history in message:
            raise
        raise ConfigurationError(
            message.replace("(archive_file)", f"({history}archive_file)")
        ) from None


def set_dotted(config: Dict[str, Any], dotted_key: str, value: Any) -> None:
    """Sets `config[a][b][c] = value` for `dotted_key` "a.b.c" (a numeric part indexes a list)."""
    *parents, last = dotted_key.split(".")
    node: Any = config
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
