"""SimpleCIL: Zhou et al., "Revisiting Class-Incremental Learning with
Pre-Trained Models: Generalizability and Adaptivity are All You Need" (2023).

No training: after each task the cosine classifier's rows of the new classes
are the class means of the frozen feature; prediction is argmax cos(x, mu_c).
"""

from __future__ import annotations

import torch
from avalanche.training.templates import SupervisedTemplate
from torch import nn

from cl_bench.backbones.base import Backbone
from cl_bench.contract import EVAL_BATCH_SIZE, Inputs, Method, MethodSpec, Resumable, Schedule
from cl_bench.strategies.blocks.heads import CosineClassifier, set_prototypes


class SimpleCIL(Method, Resumable, SupervisedTemplate):
    """Prototype classifier over frozen-feature experiences."""

    spec = MethodSpec(
        inputs=Inputs.FEATURES,
        trains_backbone=False,
        schedule=Schedule.PER_TASK,
        protocol=(EVAL_BATCH_SIZE,),
    )

    def __init__(
        self,
        *,
        params: dict,
        backbone: Backbone,
        n_classes: int,
        device: torch.device,
        plugins: list,
        evaluator,
    ) -> None:
        self.params = params
        dim = backbone.dim
        model = CosineClassifier(dim, learn_scale=False).requires_grad_(False)
        super().__init__(
            model=model,
            optimizer=torch.optim.SGD([model.sigma], lr=0.0),
            criterion=nn.CrossEntropyLoss(),
            train_mb_size=params["batch_size"],
            train_epochs=0,
            eval_mb_size=params["eval_batch_size"],
            device=device,
            plugins=plugins,
            evaluator=evaluator,
        )

    def model_adaptation(self, model=None):
        return (self.model if model is None else model).to(self.device)

    def make_optimizer(self, **kwargs) -> None:
        """Nothing is trained."""

    def _after_training_exp(self, **kwargs) -> None:
        set_prototypes(self.model, self.experience.dataset.eval(), lambda x: x, self.device)
        super()._after_training_exp(**kwargs)

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """Every task adds its classes' prototypes (account)."""
        return 1
