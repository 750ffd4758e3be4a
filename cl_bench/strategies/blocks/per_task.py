"""The per-task template: optimizer and scheduler rebuilt at every task (official
behaviour of TOSCA and of the prompt baselines) from a method's params
(:func:`cl_bench.contract.optimizer.make_optimizer`); and the mixed-precision training
shared by the methods that run the backbone (forward under autocast, loss scaling in
fp16)."""

from __future__ import annotations

import torch
from avalanche.training.templates import SupervisedTemplate
from torch import nn

from cl_bench.backbones.base import autocast
from cl_bench.contract import Method, Resumable
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.strategies.blocks.loss_scale import LossScaling


class AutocastForward(LossScaling):
    """Strategy mixin: the model's forward under the backbone's precision (bf16
    autocast where the hardware has bf16 units, fp16 autocast with a scaled loss
    where it has not: :class:`LossScaling`), logits returned in fp32 so the loss is
    computed in full precision. Set ``self.precision`` in the constructor."""

    def forward(self):
        with autocast(self.device, self.precision):
            return self.forward_model().float()

    def forward_model(self):
        """The template's forward; a strategy that passes more than the images
        overrides this."""
        return super().forward()


class PerTaskTemplate(Method, Resumable, SupervisedTemplate):
    """SupervisedTemplate with the card's batch sizes and epochs, cross-entropy, and an
    optimizer and per-epoch schedule rebuilt at every task from the method's params
    (``build_optimizer``; a method with its own schedule overrides it). Nothing of the
    optimizer outlives a task, so a per-task checkpoint need not save it."""

    def __init__(
        self,
        *,
        params: dict,
        model: nn.Module,
        device: torch.device,
        plugins: list,
        evaluator,
        **kwargs,
    ) -> None:
        self.params = params
        optimizer, self.scheduler = self.build_optimizer(model)
        super().__init__(
            model=model,
            optimizer=optimizer,
            criterion=nn.CrossEntropyLoss(),
            train_mb_size=params["batch_size"],
            train_epochs=params["epochs"],
            eval_mb_size=params["eval_batch_size"],
            device=device,
            plugins=plugins,
            evaluator=evaluator,
            **kwargs,
        )

    def build_optimizer(self, model: nn.Module):
        """Optimizer and per-epoch schedule over the trainable parameters."""
        return make_optimizer(self.params, model.parameters())

    def make_optimizer(self, **kwargs) -> None:
        """A fresh optimizer and schedule per task (momentum is not carried over)."""
        self.optimizer, self.scheduler = self.build_optimizer(self.model)
        self.optimized_param_id = {}  # tells Avalanche the optimizer is built

    def _after_training_epoch(self, **kwargs) -> None:
        if self.scheduler is not None:
            self.scheduler.step()
        super()._after_training_epoch(**kwargs)
