"""Installs `torchvision_placeholder` and the `.pth` file that activates it (see its docstring).

The `.pth` must land at the root of site-packages, so the build step copies it there explicitly
(an editable install would not).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_FILE = "torchvision_placeholder.pth"


class BuildWithPth(build_py):
    def run(self):
        super().run()
        shutil.copy(Path(__file__).parent / PTH_FILE, Path(self.build_lib) / PTH_FILE)


setup(
    name="torchvision-placeholder",
    version="0.1.0",
    description="Placeholder torchvision module for text-only allennlp installs on CPU torch",
    py_modules=["torchvision_placeholder"],
    cmdclass={"build_py": BuildWithPth},
)
