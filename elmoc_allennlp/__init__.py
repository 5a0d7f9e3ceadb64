"""ELMo-C for AllenNLP. Importing the package registers all of its components."""
from elmoc_allennlp import compat, data, modules, models, predictors, training, commands  # noqa: F401
