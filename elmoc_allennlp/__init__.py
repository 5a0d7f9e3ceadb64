"""
ELMo-C for AllenNLP. Importing the package registers all of its components and installs the
allennlp compatibility shims of `elmoc_allennlp.compat` (logged in one line).
"""
from elmoc_allennlp.compat import install_shims

install_shims()

from elmoc_allennlp import data, modules, downstream, models, predictors, training, finetune, commands  # noqa: E402,F401
