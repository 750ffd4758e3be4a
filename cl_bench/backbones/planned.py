"""A backbone's architecture without its weights: what the dry run hashes into result
paths and what the memory estimate measures, with nothing loaded or downloaded.

timm builds the model on the ``meta`` device: every parameter has its shape and no
storage, so the feature width, input size, parameter count and the shapes of one
forward pass are known at no memory cost, whatever the image size.
"""

from __future__ import annotations

from pathlib import Path

import timm
import torch

from cl_bench.backbones import backbone_kind
from cl_bench.backbones.base import Backbone


class Unknown(Exception):
    """A result path that cannot be known without loading something; the reason."""


def planned_backbone(name: str, weights: str | None, img_size: int | None) -> Backbone:
    """The backbone as a result's config records it, with its architecture on the meta
    device (no memory, no weights). Raises :class:`Unknown` for an absent weights file."""
    if weights not in (None, "random", "pretrained") and not Path(weights).expanduser().is_file():
        raise Unknown(
            f"the weights file {weights} is not on this machine (its digest names the result)"
        )
    if backbone_kind(name) == "vit":
        from cl_bench.backbones.vit import PINNED_TAGS, weights_identity

        tag = PINNED_TAGS[name]
        with torch.device("meta"):
            model = timm.create_model(
                tag if weights is None else tag.split(".")[0],
                pretrained=False,
                num_classes=0,
                **({"img_size": img_size} if img_size else {}),
            )
        record, digest = weights_identity(name, weights)
        return Backbone(
            name=name,
            model=model,
            dim=model.num_features,
            input_size=model.patch_embed.img_size[0],
            kind="vit",
            weights=record,
            weights_digest=digest,
        )
    from cl_bench.backbones import efficientnet as lite0

    with torch.device("meta"):
        model = timm.create_model(lite0.TIMM_NAME, pretrained=False)
    record, digest = lite0.weights_identity(weights or "pretrained")
    return Backbone(
        name=name,
        model=model,
        dim=lite0.DIM,
        input_size=img_size or lite0.INPUT_SIZE,
        kind="cnn",
        weights=record,
        weights_digest=digest,
        mean=lite0.MEAN,
        std=lite0.STD,
    )
