"""APER: Zhou, Cai, Ye, Zhan, Liu, "Revisiting Class-Incremental Learning with
Pre-Trained Models: Generalizability and Adaptivity are All You Need" (IJCV 2024;
arXiv 2303.07338; earlier "ADAM").

The backbone is adapted on the first task only (:mod:`first_session`; the paper's
default: adapters), then frozen. Every image is represented by the concatenation of
the frozen and the adapted final features,

    phi(x) = [f_frozen(x), f_adapted(x)]   (2d),

and classified by a prototype classifier: the row of class c is the mean of phi over
its training images (set once, in the task that brings c), and the prediction is
argmax_c cos(phi(x), p_c). ``adapt: none`` leaves phi = f_frozen (SimpleCIL).
"""

from __future__ import annotations

import torch

from cl_bench.backbones.base import Backbone
from cl_bench.strategies.blocks.first_session import FirstSessionNet, FirstSessionTemplate
from cl_bench.strategies.blocks.heads import CosineClassifier


class AperNet(FirstSessionNet):
    """The prototype classifier over phi (cosine, fixed scale 1)."""

    def __init__(self, backbone: Backbone, variant: str, params: dict) -> None:
        super().__init__(backbone, variant, params)
        width = backbone.dim * (1 if self.adaptation is None else 2)
        self.classifier = CosineClassifier(width, learn_scale=False).requires_grad_(False)

    def classify(self, f: torch.Tensor) -> torch.Tensor:
        return self.classifier(f)


class Aper(FirstSessionTemplate):
    """APER as an Avalanche strategy (see the module docstring)."""

    AUTO = {"vit": "adapter", "cnn": "bn"}  # the official variants per backbone kind
    uses_frozen = True

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
        model = AperNet(backbone, self.variant(params, backbone), params)
        super().__init__(
            params=params,
            backbone=backbone,
            model=model,
            device=device,
            plugins=plugins,
            evaluator=evaluator,
        )

    def fit(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """The rows of the task's classes: their mean phi. ``x`` and ``y`` are on the host
        (:func:`~cl_bench.strategies.blocks.first_session.gather`): the means are taken
        there and written to the classifier at once, not with a copy per class."""
        head = self.model.classifier
        head.grow(int(y.max()) + 1)
        classes = torch.unique(y)
        means = torch.stack([x[y == c].mean(0) for c in classes.tolist()])
        head.weight.data[classes.to(head.weight.device)] = means.to(head.weight)

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """The backbone adapts on the first task only; every later task fits its
        prototypes on features (account)."""
        return 1
