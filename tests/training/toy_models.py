from typing import Dict, Optional

import torch

from allennlp.data import Vocabulary
from allennlp.models import Model


class ToyRegression(Model):
    """One weight and one bias fitted to `y` by squared error: a model for trainer tests."""

    def __init__(self) -> None:
        super().__init__(Vocabulary())
        self.linear = torch.nn.Linear(1, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:  # type: ignore
        return {"loss": ((self.linear(x) - y) ** 2).mean()}


def toy_trainer(
    serialization_dir,
    trainer_type: str,
    model: Optional[Model] = None,
    validation: bool = False,
    **settings,
):
    """A `Trainer` of `trainer_type` built by `from_params` (as a config builds it) for `model`
    (default: a `ToyRegression`) on two one-instance batches, validated on them if `validation`,
    one epoch of SGD; `settings` are more trainer keys."""
    from allennlp.common import Params
    from allennlp.data import Instance
    from allennlp.data.data_loaders import SimpleDataLoader
    from allennlp.data.fields import TensorField
    from allennlp.training import Trainer

    model = model if model is not None else ToyRegression()
    instances = [
        Instance({"x": TensorField(torch.tensor([1.0])), "y": TensorField(torch.ones(1))})
    ] * 2
    loader = SimpleDataLoader(instances, batch_size=1, vocab=model.vocab)
    return Trainer.from_params(
        params=Params(
            {
                "type": trainer_type,
                "optimizer": {"type": "sgd", "lr": 0.1},
                "num_epochs": 1,
                **settings,
            }
        ),
        model=model,
        serialization_dir=str(serialization_dir),
        data_loader=loader,
        validation_data_loader=loader if validation else None,
    )
