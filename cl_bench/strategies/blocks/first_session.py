"""The strategy shape APER and RanPAC share: adapt on the first task, then fit a
classifier on features, task by task, without training anything again.

Task 1 (its training images): the adaptation (:mod:`cl_bench.strategies.blocks.first_session_adapt`)
and a cosine head over the task's classes on the adapted feature are trained with
cross-entropy (SGD, cosine schedule: the official ``_init_train``); the head is then
discarded, the adaptation frozen, and the method's classifier is fitted on the task's
features, computed here from its images (eval transform, rounded through fp16 as the
feature store does, so they equal what the store would give). Later tasks (features
from the store): the classifier is fitted, nothing is trained (zero epochs).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from cl_bench.backbones.base import Backbone, autocast
from cl_bench.backbones.compiled import frozen_features
from cl_bench.contract import EVAL_BATCH_SIZE, Inputs, MethodSpec, Regrows, Schedule
from cl_bench.contract.loading import method_loader
from cl_bench.contract.memory import (
    Allocation,
    Workload,
    adapter_sets,
    backward_pass,
    trained_copy_state,
)
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.progress import task_bar
from cl_bench.strategies.blocks.backbone_copy import dataset_classes
from cl_bench.strategies.blocks.first_session_adapt import (
    adapted_backbone,
    check_variant,
    make_adaptation,
    resolve_variant,
)
from cl_bench.strategies.blocks.heads import CosineClassifier
from cl_bench.strategies.blocks.per_task import AutocastForward, PerTaskTemplate


class FirstSessionNet(Regrows, nn.Module):
    """``adaptation`` (None for ``adapt: none``) and, until it is trained, its cosine
    ``adapt_head``; a subclass adds the classifier on features (``classify``).
    Images (4-d input) go through the adaptation and its head; features (2-d) through
    the classifier."""

    def __init__(self, backbone: Backbone, variant: str, params: dict) -> None:
        super().__init__()
        self.spec = backbone
        self.variant = variant
        self.adaptation = make_adaptation(variant, backbone, params)
        self.adapt_head = None if self.adaptation is None else CosineClassifier(backbone.dim)

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        """A checkpoint after the first task holds no adaptation head."""
        if not any(name.startswith("adapt_head.") for name in state):
            self.adapt_head = None

    def adapted_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.spec.normalize(x)
        if self.spec.kind == "cnn":
            x = x.contiguous(memory_format=torch.channels_last)
        return self.adaptation(x)

    def classify(self, f: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            return self.adapt_head(self.adapted_features(x))
        with torch.autocast(x.device.type, enabled=False):  # the classifier in full precision
            return self.classify(x.float())


class FirstSessionTemplate(AutocastForward, PerTaskTemplate):
    """Adapt on task 1, then ``fit`` (the subclass) on every task's features.

    ``AUTO``: the variant ``adapt: auto`` means per backbone kind; ``uses_frozen``:
    whether the frozen features are read beside the adapted ones (APER) or replaced
    by them (RanPAC)."""

    spec = MethodSpec(
        inputs=Inputs.ADAPTED_FEATURES,
        trains_backbone=True,
        schedule=Schedule.PER_TASK,
        protocol=(EVAL_BATCH_SIZE,),
    )
    AUTO: ClassVar[dict[str, str]]
    uses_frozen: ClassVar[bool]

    def __init__(
        self,
        *,
        params: dict,
        backbone: Backbone,
        model: FirstSessionNet,
        device: torch.device,
        plugins: list,
        evaluator,
    ) -> None:
        self.backbone, self.precision = backbone, backbone.precision
        self._adapted: Backbone | None = None
        super().__init__(
            params=params, model=model, device=device, plugins=plugins, evaluator=evaluator
        )

    @classmethod
    def variant(cls, params: dict, backbone: Backbone) -> str:
        """The adaptation ``params["adapt"]`` means on ``backbone``."""
        return resolve_variant(params["adapt"], backbone.kind, cls.AUTO)

    @classmethod
    def resolve_params(cls, params: dict, backbone: Backbone) -> None:
        params["adapt"] = cls.variant(params, backbone)

    @classmethod
    def check_params(cls, params: dict, backbone: Backbone) -> None:
        check_variant(cls.variant(params, backbone), backbone)

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """What the first session trains and what its backward pass keeps: one adapter
        set beside every block's MLP (gradients through every block after the first),
        or every weight (the whole backbone, and the optimizer state of its copy)."""
        if params["adapt"] == "adapter":
            return [adapter_sets(work, params["ffn"], 1, "ffn"), backward_pass(work, params, 1)]
        if params["adapt"] == "finetune":
            return [
                trained_copy_state(work, params, "optimizer"),
                backward_pass(work, params, 0, trains_blocks=True),
            ]
        return []

    @property
    def adapting(self) -> bool:
        """Training on the first task's images, with something to adapt."""
        return self.clock.train_exp_counter == 0 and self.model.adaptation is not None

    def feature_backbones(self, backbone: Backbone) -> list[Backbone]:
        if self.model.adaptation is None:
            return [backbone]
        if self._adapted is None:  # after task 1 (or its restored weights): frozen now
            self.model.adaptation.requires_grad_(False)
            self._adapted = adapted_backbone(backbone, self.model.variant, self.model.adaptation)
        return [backbone, self._adapted] if self.uses_frozen else [self._adapted]

    def build_optimizer(self, model: nn.Module):
        """SGD (or AdamW) with a cosine schedule over what the first task adapts; a
        placeholder later (nothing trains, zero epochs)."""
        trainable = [p for p in model.parameters() if p.requires_grad]
        return make_optimizer(self.params, trainable or [nn.Parameter(torch.zeros(1))])

    def model_adaptation(self, model=None):
        model = self.model if model is None else model
        self.train_epochs = self.params["epochs"] if self.adapting else 0
        if self.adapting:
            model.adapt_head.grow(max(dataset_classes(self.experience.dataset)) + 1)
        return model.to(self.device)

    def _after_training_exp(self, **kwargs) -> None:
        self.model.eval()
        dataset = self.experience.dataset.eval()
        if self.clock.train_exp_counter == 0:
            self.model.adapt_head = None
            passes = self.feature_backbones(self.backbone)
            self.fit(*gather(dataset, lambda x: features_of(passes, x), self.device))
        else:
            self.fit(*gather(dataset, lambda f: f, self.device, in_memory=True))
        super()._after_training_exp(**kwargs)

    def fit(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Update the classifier with one task's features ``x`` and labels ``y``."""
        raise NotImplementedError


def features_of(backbones: list[Backbone], images: torch.Tensor) -> torch.Tensor:
    """The concatenated final features of ``images``, rounded through fp16 as the
    feature store stores them."""
    parts = []
    for b in backbones:
        with autocast(images.device, b.precision):
            parts.append(frozen_features(b, images).half().float())
    return torch.cat(parts, dim=1)


@torch.no_grad()
def gather(
    dataset, embed, device: torch.device, batch_size: int = 256, in_memory: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(embed(x), y) over ``dataset`` (items (x, y, t)), in dataset order, on CPU;
    ``in_memory``: its items are features, read with no loader worker."""
    xs, ys = [], []
    loader = method_loader(dataset, batch_size, in_memory=in_memory)
    what = "the classifier's features" if in_memory else "features for the classifier fit"
    for x, y, *_ in task_bar(loader, total=len(loader), what=what, unit="batch"):
        xs.append(embed(x.to(device)).float().cpu())
        ys.append(y)
    return torch.cat(xs), torch.cat(ys)
