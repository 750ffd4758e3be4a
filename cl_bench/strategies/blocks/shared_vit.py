"""What the methods that train modules inside the runner's frozen ViT share (the
prompt methods, the adapter methods): the checks only the backbone can make, and
building the method's model around the ViT without copying it.

The model is ``model_class(vit, normalize, n_classes, params)``, where ``vit`` is a
:class:`~cl_bench.backbones.prompted.PromptedViT` over the shared timm model (the
first ``checkpoint_blocks`` blocks under activation checkpointing when training)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from cl_bench.backbones.base import Backbone
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract import check_backbone
from cl_bench.errors import UserError


class OnSharedViT:
    """Mixed in before the per-task template: runs on a ViT only; ``injects`` (the
    contract's) names what the method puts into its blocks when another backbone is
    refused (:func:`cl_bench.contract.check_backbone`)."""

    model_class: ClassVar[type[nn.Module]]
    backbones: ClassVar[str] = "vit"

    @classmethod
    def check_params(cls, params: dict, backbone: Backbone) -> None:
        """Settings that only the backbone can validate; the runner calls this
        before any run starts, so a bad one writes nothing."""
        check_backbone(cls, cls.__name__, backbone.name, backbone.kind)
        depth = len(backbone.model.blocks)
        if params["checkpoint_blocks"] > depth:
            raise UserError(
                f"{cls.__name__}: checkpoint_blocks = "
                f"{params['checkpoint_blocks']}, but {backbone.name} has "
                f"{depth} blocks; use 0 to {depth} (--set "
                f"<method>.checkpoint_blocks=...)."
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
        self.check_params(params, backbone)
        self.precision = backbone.precision
        vit = PromptedViT(backbone.model, checkpoint_blocks=params["checkpoint_blocks"])
        model = self.model_class(vit, backbone.normalize, n_classes, params)
        super().__init__(
            params=params, model=model, device=device, plugins=plugins, evaluator=evaluator
        )
