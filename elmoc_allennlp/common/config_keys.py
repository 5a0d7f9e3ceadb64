"""Config keys: naming them in errors, and setting a value by its dotted key."""
import contextlib
from typing import Any, Dict, Iterator

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError


@contextlib.contextmanager
def naming_the_config_key(params: Params) -> Iterator[None]:
    """Turns "(archive_file)" in the block's `ConfigurationError`s into the full config key."""
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
