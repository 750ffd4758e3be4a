"""First-session adaptation (APER, RanPAC): the backbone is adapted on the first task
only, then frozen, and its features are read from the feature store like the frozen
backbone's.

Variants (card key ``adapt``):

* ``adapter``: AdaptFormer bottleneck adapters parallel to every ViT block's MLP (the
  papers' default on a ViT; :mod:`cl_bench.backbones.adapters`);
* ``finetune``: every weight of the backbone (its pretrained classifier excepted) is
  trained (APER's finetune variant);
* ``bn``: no weight changes; the batch-norm running statistics are cleared and
  re-estimated by forward passes in training mode over the first task's (augmented)
  training images, ``epochs`` times (APER w/ BN, the official code's variant for a
  ResNet: ``models/aper_bn.py`` of zhoudw-zdw/RevisitingCIL); a CNN only;
* ``none``: no adaptation; the frozen backbone's features throughout;
* ``auto``: the method's rule per backbone kind (``AUTO`` of its strategy class), so a
  card can hold the paper's ViT setting and still run on the embedded CNN demo; the
  resolved variant replaces ``auto`` in the run's config (``resolve_params``).

The adapted tensors are the method's own (they live in its model: stored, counted,
checkpointed); the network runs through the shared backbone's architecture with them
substituted (``torch.func.functional_call``), so no second copy of the architecture
exists and the shared backbone's own weights never change. Once adapted, the method
names :func:`adapted_backbone` in ``feature_backbones``: a :class:`Backbone` whose
weights digest hashes the adapted tensors, so its features are cached under it.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import replace

import torch
from torch import nn
from torch.func import functional_call

from cl_bench.backbones.adapters import AdapterSet, adapted
from cl_bench.backbones.base import TORCH_RUNTIME, Backbone, PreLogits
from cl_bench.errors import UserError

VARIANTS = ("auto", "adapter", "finetune", "bn", "none")


def resolve_variant(value: str, kind: str, auto: dict[str, str]) -> str:
    """The variant ``value`` means on a backbone of ``kind`` (``auto``: ``auto[kind]``)."""
    return auto[kind] if value == "auto" else value


def check_variant(value: str, backbone: Backbone) -> None:
    """Adapters exist for ViT blocks only; batch-norm statistics in a CNN only."""
    if value == "adapter" and backbone.kind != "vit":
        raise UserError(
            f'adapt = "adapter" inserts adapters into transformer blocks, but '
            f'"{backbone.name}" is a CNN. Use adapt=auto (the method\'s variant '
            "for a CNN) or another value its card allows, or a ViT backbone."
        )
    if value == "bn" and not any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) for m in backbone.model.modules()
    ):
        raise UserError(
            f'adapt = "bn" re-estimates batch-norm statistics, but '
            f'"{backbone.name}" has no batch-norm layer (a ViT uses layer norm). '
            "Use adapt=auto (the method's variant for a ViT) or another value "
            "its card allows."
        )


@contextlib.contextmanager
def mode(model: nn.Module, training: bool) -> Iterator[None]:
    """The shared model in ``training`` mode for one call (dropout, batch-norm
    statistics), back in eval mode after it."""
    model.train(training)
    try:
        yield
    finally:
        model.eval()


class FullWeights(nn.Module):
    """Every parameter and buffer of the shared backbone as trainable copies (its
    classifier, unused by the final feature, left out); ``forward`` runs the shared
    architecture with them. Input: normalised images; output: the final feature."""

    def __init__(self, backbone: Backbone) -> None:
        super().__init__()
        shared = backbone.model
        head = {
            id(t)
            for t in (*shared.get_classifier().parameters(), *shared.get_classifier().buffers())
        }
        self._run = (PreLogits(shared),)  # a tuple: the shared model is not a submodule
        params = [(n, p) for n, p in shared.named_parameters() if id(p) not in head]
        buffers = [(n, b) for n, b in shared.named_buffers() if id(b) not in head]
        self.names = [n for n, _ in params] + [n for n, _ in buffers]
        self.weights = nn.ParameterList(nn.Parameter(p.detach().clone()) for _, p in params)
        for i, (_, b) in enumerate(buffers):
            self.register_buffer(f"stat{i}", b.detach().clone())

    def tensors(self) -> dict[str, torch.Tensor]:
        own = [
            *self.weights,
            *(getattr(self, f"stat{i}") for i in range(len(self.names) - len(self.weights))),
        ]
        return {f"m.{n}": t for n, t in zip(self.names, own, strict=True)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        run = self._run[0]
        with mode(run.m, self.training):
            return functional_call(run, self.tensors(), (x,))


class BatchNormStats(nn.Module):
    """Copies of the shared CNN's batch-norm running statistics, cleared (zero mean,
    variance and count, as the official ``clear_running_mean``); ``forward`` runs the
    shared architecture with them, so a forward pass in training mode re-estimates
    them (batch norm updates the substituted buffers in place) while every weight
    stays the shared one. Nothing here takes gradients."""

    def __init__(self, backbone: Backbone) -> None:
        super().__init__()
        shared = backbone.model
        self._run = (PreLogits(shared),)  # a tuple: the shared model is not a submodule
        self.names = [
            n for n, m in shared.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
        ]
        for i, name in enumerate(self.names):
            layer = shared.get_submodule(name)
            self.register_buffer(f"mean{i}", torch.zeros_like(layer.running_mean))
            self.register_buffer(f"var{i}", torch.zeros_like(layer.running_var))
            self.register_buffer(f"count{i}", torch.zeros_like(layer.num_batches_tracked))

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {}
        for i, name in enumerate(self.names):
            out[f"m.{name}.running_mean"] = getattr(self, f"mean{i}")
            out[f"m.{name}.running_var"] = getattr(self, f"var{i}")
            out[f"m.{name}.num_batches_tracked"] = getattr(self, f"count{i}")
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        run = self._run[0]
        with torch.no_grad(), mode(run.m, self.training):
            return functional_call(run, self.tensors(), (x,))


class Adapters(nn.Module):
    """AdaptFormer adapters (width ``ffn``) on every block of the shared ViT, hooked in
    for each call (:func:`cl_bench.backbones.adapters.adapted`). Input: normalised
    images; output: the final feature."""

    def __init__(self, backbone: Backbone, ffn: int) -> None:
        super().__init__()
        shared = backbone.model
        self._shared = (shared,)  # a tuple: the shared model is not a submodule
        self.set = AdapterSet(backbone.dim, ffn, range(len(shared.blocks)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shared = self._shared[0]
        with mode(shared, self.training), adapted(shared.blocks, self.set):
            return shared.forward_head(shared.forward_features(x), pre_logits=True)


def make_adaptation(variant: str, backbone: Backbone, params: dict) -> nn.Module | None:
    """The trainable part of ``variant`` (None for ``none``)."""
    if variant == "none":
        return None
    if variant == "finetune":
        return FullWeights(backbone)
    if variant == "bn":
        return BatchNormStats(backbone)
    return Adapters(backbone, params["ffn"])


class _AsModel(nn.Module):
    """An adaptation seen as a timm model by :class:`Backbone` (``forward_features``
    gives the final feature, ``forward_head(pre_logits=True)`` passes it on)."""

    def __init__(self, adaptation: nn.Module) -> None:
        super().__init__()
        self.adaptation = adaptation

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        self.adaptation.eval()  # a frozen backbone's features: dropout off, batch-norm
        return self.adaptation(x)  # running statistics (Avalanche may have left train mode)

    def forward_head(self, f: torch.Tensor, pre_logits: bool = True) -> torch.Tensor:
        return f


def weights_digest(frozen: Backbone, variant: str, adaptation: nn.Module) -> str:
    """sha256 of the frozen weights' digest, the variant and every adapted tensor."""
    h = hashlib.sha256(f"{frozen.weights_digest}|{variant}".encode())
    for name, t in adaptation.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def adapted_backbone(frozen: Backbone, variant: str, adaptation: nn.Module) -> Backbone:
    """The adapted network as a frozen :class:`Backbone` (eval mode, no gradients) named
    ``<backbone>+<variant>``, keyed in the feature cache by its own weights digest. Its
    passes run in torch whatever runs the frozen one's: they substitute tensors through
    ``functional_call``, which a compiled runtime's tracer cannot follow."""
    return replace(
        frozen,
        name=f"{frozen.name}+{variant}",
        model=_AsModel(adaptation),
        weights_digest=weights_digest(frozen, variant, adaptation),
        runtime=TORCH_RUNTIME,
    )
