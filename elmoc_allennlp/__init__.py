"""ELMo-C for AllenNLP. Importing the package registers all of its components."""
from elmoc_allennlp import data, modules, models, predictors, training, commands  # noqa: F401
from elmoc_allennlp.compat import predict_input_lines, safe_archive_extraction, safe_config_types

safe_archive_extraction.install()
safe_config_types.install()
predict_input_lines.install()
