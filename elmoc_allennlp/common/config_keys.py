"""Naming the config key of a biLM archive in the errors of the components that read one."""
import contextlib
from typing import Iterator

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
