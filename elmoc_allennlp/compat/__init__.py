from elmoc_allennlp.compat.reduce_on_plateau import ReduceOnPlateauLearningRateScheduler
from elmoc_allennlp.compat import atomic_train_files  # noqa: F401
