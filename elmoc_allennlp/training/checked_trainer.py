"""allennlp's trainer for the plugin's downstream configs: a misspelt key is an error, not ignored."""
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.trainer import Trainer

from elmoc_allennlp.common.checks import check_known_keys
from elmoc_allennlp.training.fast_recovery_trainer import _KNOWN_KEYS


@Trainer.register("elmoc_checked_gradient_descent", constructor="from_partial_objects")
class CheckedGradientDescentTrainer(GradientDescentTrainer):
    """
    allennlp's `GradientDescentTrainer` for the plugin's downstream configs: a key that is not one of its
    parameters is a `ConfigurationError` naming the key it most probably meant (the stock trainer ignores it).

    Its parameters are allennlp's `GradientDescentTrainer`'s, taken on unchanged and documented
    there.

    Registered as a `Trainer` with name "elmoc_checked_gradient_descent".
    """

    def __init__(self, *args, **kwargs) -> None:
        check_known_keys(kwargs, _KNOWN_KEYS, "elmoc_checked_gradient_descent", prefix="trainer.")
        super().__init__(*args, **kwargs)
