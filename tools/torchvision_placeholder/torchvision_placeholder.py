"""A stand-in for `torchvision`, used only when no real torchvision can be found.

allennlp 2.10.1 imports torchvision at module level (`allennlp/data/image_loader.py`), which every
`import allennlp.data` reaches, although text models never use it. PyPI's torchvision builds for
torch 2.13 are CUDA builds that fail to load beside the CPU torch wheel. The `.pth` file shipped with
this package calls `install()` at interpreter start-up: it appends a finder to the *end* of
`sys.meta_path`, so a real torchvision, when installed, is always found first.
Any use of the placeholder (calling or instantiating anything from it) raises a clear error.
"""

import importlib.abc
import importlib.machinery
import sys
import types

_MESSAGE = (
    "torchvision is not installed; elmoc_allennlp registered a placeholder so that allennlp's "
    "text-only code paths import. Install a torchvision build that matches your torch to use `{}`."
)


class _Unavailable:
    def __init__(self, qualified_name: str) -> None:
        self._qualified_name = qualified_name

    def __getattr__(self, name: str) -> "_Unavailable":
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{self._qualified_name}.{name}")

    def __call__(self, *args, **kwargs):
        raise ImportError(_MESSAGE.format(self._qualified_name))

    def __mro_entries__(self, bases):
        raise ImportError(_MESSAGE.format(self._qualified_name))


class _PlaceholderModule(types.ModuleType):
    __elmoc_placeholder__ = True

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{self.__name__}.{name}")


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        module.__version__ = "0.0.0+placeholder"


def install() -> None:
    if not any(isinstance(finder, _PlaceholderFinder) for finder in sys.meta_path):
        sys.meta_path.append(_PlaceholderFinder())
