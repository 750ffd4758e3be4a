"""Backbone registry: ``load_backbone(name, weights)`` -> frozen :class:`Backbone`."""

from __future__ import annotations

from cl_bench.backbones.base import Backbone
from cl_bench.errors import unknown

VIT_NAMES = (
    "vit_base_patch16_224",
    "vit_base_patch16_224_in1k",
    "vit_small_patch16_224",
    "vit_tiny_patch16_224",
)
BACKBONES = {"efficientnet_lite0": "cnn", **{n: "vit" for n in VIT_NAMES}}
DEFAULT_BACKBONE = "efficientnet_lite0"


def backbone_names() -> list[str]:
    return list(BACKBONES)


def backbone_kind(name: str) -> str:
    if name not in BACKBONES:
        raise unknown("backbone", name, BACKBONES)
    return BACKBONES[name]


def load_backbone(name: str, weights: str | None = None, img_size: int | None = None) -> Backbone:
    """The frozen backbone ``name`` with ``weights``: None (its pretrained
    weights), a local file, or ``random``."""
    if backbone_kind(name) == "vit":
        from cl_bench.backbones.vit import vit

        return vit(name, weights, img_size)
    from cl_bench.backbones.efficientnet import efficientnet_lite0

    return efficientnet_lite0(weights or "pretrained", img_size)


def use_weights_normalization(backbone: Backbone) -> None:
    """Normalise inputs with the mean/std the weights were trained with (timm's data
    config); the official TOSCA code feeds ViTs un-normalised [0, 1] images."""
    from timm.data import resolve_data_config

    cfg = resolve_data_config({}, model=backbone.model)
    backbone.mean, backbone.std = tuple(cfg["mean"]), tuple(cfg["std"])


__all__ = [
    "Backbone",
    "backbone_names",
    "backbone_kind",
    "load_backbone",
    "DEFAULT_BACKBONE",
    "use_weights_normalization",
]
