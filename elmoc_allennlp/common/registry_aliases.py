"""
The plugin registers its components under names starting with `elmoc`, so that they cannot clash
with other plugins in allennlp's global registries. Components registered under an unprefixed
name before (`fasttext`, `rnmt_plus`, `continuous`, ...) keep that name as an alias, so that
configs and model archives written with it still load.
"""
import logging
from typing import Callable, Type, TypeVar

from allennlp.common import Registrable

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=type)


def register_old_name(base: Type[Registrable], old_name: str) -> Callable[[T], T]:
    """
    A class decorator that also registers the class as `old_name` of `base`, next to its
    `elmoc_...` name. If another plugin already registered `old_name`, that registration is kept
    (configs using `old_name` then mean the other plugin's component) and a warning says so.

    ```python
    @TokenEmbedder.register("elmoc_fasttext")
    @register_old_name(TokenEmbedder, "fasttext")
    class FastTextTokenEmbedder(TokenEmbedder):
        ...
    ```
    """

    def register(subclass: T) -> T:
        registry = Registrable._registry[base]
        registered = registry.get(old_name)
        if registered is None:
            base.register(old_name)(subclass)
        elif registered[0] is not subclass:
            logger.warning(
                "%s name %r is taken by %s.%s, so it does not refer to %s: use its elmoc_ name",
                base.__name__,
                old_name,
                registered[0].__module__,
                registered[0].__qualname__,
                subclass.__qualname__,
            )
        return subclass

    return register
