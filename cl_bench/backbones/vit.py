"""Vision Transformers through timm's public API, with pinned pretrained tags.

Weights: the pinned tag through timm / Hugging Face (hub or local cache), a
local file (``.safetensors``, ``.pth``/``.pt``, ``.npz`` as timm reads it), or
``random`` when asked (recorded, warned about).
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from unittest import mock

import timm
import torch

from cl_bench.backbones.base import RANDOM_INIT_SEED, Backbone, seeded_init
from cl_bench.errors import UserError

# the paper's default (ImageNet-21k) tags; timm >= 0.9 names
PINNED_TAGS = {
    "vit_base_patch16_224": "vit_base_patch16_224.augreg_in21k",
    "vit_base_patch16_224_in1k": "vit_base_patch16_224.augreg2_in21k_ft_in1k",
    "vit_small_patch16_224": "vit_small_patch16_224.augreg_in21k",
    "vit_tiny_patch16_224": "vit_tiny_patch16_224.augreg_in21k",
}


def _hf_cache() -> str:
    return os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub"
    )


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a local weights file, with a clear error for anything unreadable."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 -- any reader failure means a bad file
        raise UserError(
            f"Cannot read weights file {path}: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}. Check that it is a "
            "complete .safetensors/.pth file for this backbone."
        ) from None
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict):
        raise UserError(f"Weights file {path} does not hold a state dict.")
    return state


def load_into(model: torch.nn.Module, state: dict, path: Path) -> None:
    """Strict load with shape checks; the head may be absent or differently sized."""
    own = model.state_dict()
    state = {
        k: v
        for k, v in state.items()
        if not k.startswith("head.") or (k in own and own[k].shape == v.shape)
    }
    bad = [
        f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and own[k].shape != v.shape
    ]
    missing = [k for k in own if k not in state and not k.startswith("head.")]
    unexpected = [k for k in state if k not in own]
    if bad or missing or unexpected:
        parts = [
            f"{label}: {', '.join(v[:4])}{' ...' if len(v) > 4 else ''}"
            for label, v in (
                ("wrong shapes", bad),
                ("missing", missing),
                ("unexpected", unexpected),
            )
            if v
        ]
        raise UserError(
            f"Weights file {path} does not fit this backbone ({'; '.join(parts)}). "
            "Pass a file saved from the same timm architecture."
        )
    model.load_state_dict(state, strict=False)


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check, so that an offline machine fails in seconds instead of
    after the hub client's minute of retries."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return False
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def from_hub(tag: str, kwargs: dict) -> torch.nn.Module:
    """The pinned tag from the local Hugging Face cache, else from the hub."""
    from huggingface_hub import constants

    try:
        with mock.patch.object(constants, "HF_HUB_OFFLINE", True):
            return timm.create_model(tag, pretrained=True, **kwargs)
    except Exception:  # noqa: BLE001, S110 -- not cached: try the hub below
        pass
    reason = "no cached copy, and the hub is unreachable"
    if hub_reachable():
        try:
            return timm.create_model(tag, pretrained=True, **kwargs)
        except Exception as e:  # noqa: BLE001 -- hub, network or cache failure
            reason = f"download failed: {type(e).__name__}"
    raise UserError(
        f"Cannot load the pretrained weights {tag} ({reason}). They come from the Hugging "
        f"Face hub or its local cache ({_hf_cache()}). Download them once while online "
        "(they are then cached), or pass a local file with --weights FILE "
        "(.safetensors/.pth/.npz), or --weights random for a smoke test."
    )


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def weights_identity(name: str, weights: str | None) -> tuple[str, str]:
    """(weights as recorded, digest) of ``weights`` for ViT ``name``, read without loading
    them (a local file is hashed), so that a dry run plans the same result path."""
    if weights == "random":
        return "random", f"random-seed{RANDOM_INIT_SEED}"
    if weights:
        return str(Path(weights).resolve()), file_digest(Path(weights))
    return PINNED_TAGS[name], hashlib.sha256(PINNED_TAGS[name].encode()).hexdigest()[:16]


def vit(name: str, weights: str | None = None, img_size: int | None = None) -> Backbone:
    """A frozen timm ViT; ``weights``: None (pinned tag), a file path or 'random'."""
    kwargs = {"num_classes": 0}
    if img_size:
        kwargs["img_size"] = img_size
    tag = PINNED_TAGS[name]
    arch = tag.split(".")[0]
    if weights == "random":
        with seeded_init():
            model = timm.create_model(arch, pretrained=False, **kwargs)
    elif weights:
        path = Path(weights)
        if not path.is_file():
            raise UserError(
                f"Weights file {path} does not exist. Give --weights an existing "
                ".safetensors/.pth/.npz file, or omit it to use the pinned tag."
            )
        model = timm.create_model(arch, pretrained=False, **kwargs)
        if path.suffix == ".npz":
            try:
                model.load_pretrained(str(path))
            except Exception as e:  # noqa: BLE001
                raise UserError(f"Cannot load {path} as timm .npz ViT weights: {e}.") from None
        else:
            load_into(model, read_state_dict(path), path)
    else:
        model = from_hub(tag, kwargs)
    record, digest = weights_identity(name, weights)
    size = model.patch_embed.img_size[0]
    return Backbone(
        name=name,
        model=model,
        dim=model.num_features,
        input_size=size,
        kind="vit",
        weights=record,
        weights_digest=digest,
    )
