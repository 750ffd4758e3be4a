"""Pieces shared by the methods that fine-tune the whole backbone on images
(Finetune, EWC, Joint): a private trainable copy of the backbone with a linear
head, masking of classes not seen yet, and the per-task optimizer.

The runner lends one frozen :class:`Backbone` to every method of a run, so a
method that trains the backbone must train a copy of it; otherwise the next
method would start from weights the previous one fine-tuned.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
from torch import nn

from cl_bench.backbones.base import Backbone
from cl_bench.contract import EVAL_BATCH_SIZE, Inputs, MethodSpec, Schedule
from cl_bench.contract.memory import Allocation, Workload, backward_pass, trained_copy_state
from cl_bench.strategies.blocks.device_cache import DeviceCache
from cl_bench.strategies.blocks.per_task import AutocastForward, PerTaskTemplate


def dataset_classes(dataset) -> list[int]:
    """Labels present in an Avalanche classification dataset."""
    return sorted(int(c) for c in dataset.targets.uniques)


class FinetuneNet(nn.Module):
    """Trainable copy of the backbone + one linear head over all ``n_classes``.

    logits = W f(normalize(x)) + b, where f is timm's ``forward_head(...,
    pre_logits=True)`` (the [CLS] token for a ViT, the pooled vector for a
    CNN). The head has a row for every class of the scenario from the start;
    rows of classes not seen yet are masked to -inf, in training and in
    evaluation, so the softmax runs over the seen classes only. That is the
    same as a head that grows by a block of rows per task, without rebuilding
    the parameter (and the optimizer state) when it grows.
    """

    def __init__(self, backbone: Backbone, n_classes: int) -> None:
        super().__init__()
        self.backbone = copy.deepcopy(backbone.model).requires_grad_(True)
        # the pretrained classifier (EfficientNet keeps its 1000-way one) is never
        # used by forward_head(pre_logits=True): drop it rather than train dead weights
        self.backbone.reset_classifier(0)
        self.head = nn.Linear(backbone.dim, n_classes)
        # the backbone's description without its shared weights: reuses its
        # normalize() and never holds a reference to the shared model
        self.spec = replace(backbone, model=nn.Identity())
        # a plain tensor, not a buffer: a label mask is not state the method stores;
        # replaced, never changed in place, so that its device copy follows it
        self.active = torch.zeros(n_classes, dtype=torch.bool)
        self.on_device = DeviceCache()

    def see(self, classes: list[int]) -> None:
        """Unmask ``classes`` (for good: they stay active in later tasks)."""
        active = self.active.clone()
        active[classes] = True
        self.active = active

    def restrict(self, classes: list[int]) -> None:
        """Make ``classes`` the only active ones."""
        self.active = torch.zeros_like(self.active)
        self.see(classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.spec.normalize(x)
        if self.spec.kind == "cnn":
            x = x.contiguous(memory_format=torch.channels_last)
        return self.backbone.forward_head(self.backbone.forward_features(x), pre_logits=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.features(x))
        masked = self.on_device.get("masked", logits.device, (self.active,), lambda: ~self.active)
        return logits.masked_fill(masked, float("-inf"))


class FinetuneTemplate(AutocastForward, PerTaskTemplate):
    """Cross-entropy fine-tuning of backbone + head over the seen classes.

    Each training call unmasks the classes of the data it trains on and builds
    a fresh optimizer and schedule (``per_task.make_optimizer``: SGD with momentum
    by default) over every trainable parameter, as PILOT's fine-tuning
    baseline does per task. Subclasses add a regulariser (EWC) or change what
    is trained on (Joint).
    """

    # trains a private copy: the runner keeps the shared backbone's weights in fp32
    spec = MethodSpec(
        inputs=Inputs.IMAGES,
        trains_backbone=True,
        schedule=Schedule.PER_TASK,
        protocol=(EVAL_BATCH_SIZE,),
    )
    state_attrs = ("model.active",)

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """The optimizer state of the trained copy (the engine counts the copy), and
        what the backward pass keeps: every block, with its weights trained."""
        return [
            trained_copy_state(work, params, "optimizer"),
            backward_pass(work, params, 0, trains_blocks=True),
        ]

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
        self.precision = backbone.precision
        super().__init__(
            params=params,
            model=FinetuneNet(backbone, n_classes),
            device=device,
            plugins=plugins,
            evaluator=evaluator,
        )

    def model_adaptation(self, model=None):
        """Before training: unmask the classes of the (adapted) training data."""
        model = self.model if model is None else model
        if self.is_training:
            model.see(dataset_classes(self.adapted_dataset))
        return model.to(self.device)
