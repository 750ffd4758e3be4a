"""Parameters and FLOPs that count everything a method runs and keeps.

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` on the method's
real forward (and, for training, its real first step), so query passes,
prompted passes and per-task modules are counted because they run, not
because a method declares them. Two gaps of the counter are closed here:
the CPU fused attention kernel (``_scaled_dot_product_flash_attention_for_cpu``
and its backward) has no formula in torch, which drops every attention matmul
on CPU (ViT-B/16: 33.70 instead of 35.13 GFLOPs); and a features-only method
never calls the backbone inside its model, so one pass of each backbone whose
features it reads (:meth:`~cl_bench.contract.Method.feature_backbones`: the frozen
one; APER's frozen and adapted ones) is added.

Parameters: ``stored`` is everything a method keeps beyond the pretrained
backbone: its modules, prompts, keys, heads, prototypes, and tensors its
plugins hold (EWC importances and anchors; not
:class:`~cl_bench.contract.Bookkeeping` plugins such as the recorder). A backbone
inside the method's model (shared, or a fine-tuned copy) is recognised by its type and not
counted as added.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable

import torch
from avalanche.core import SupervisedPlugin
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, flop_registry, register_flop_formula

from cl_bench.backbones.base import Backbone, autocast
from cl_bench.contract import Bookkeeping, Inputs, Stateful, spec_of

aten = torch.ops.aten


def _attention_flops(q: tuple, k: tuple, v: tuple) -> int:
    """QK^T and AV: 2 * B * H * Lq * Lk * (Dk + Dv)."""
    *batch, lq, dk = q
    lk, dv = k[-2], v[-1]
    n = 1
    for b in batch:
        n *= b
    return 2 * n * lq * lk * (dk + dv)


if aten._scaled_dot_product_flash_attention_for_cpu.default not in flop_registry:

    @register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu)
    def _cpu_attention(query, key, value, *args, out_shape=None, **kwargs) -> int:
        return _attention_flops(query, key, value)

    @register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu_backward)
    def _cpu_attention_backward(
        grad_out, query, key, value, *args, out_shape=None, **kwargs
    ) -> int:
        # dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: twice the forward matmuls
        return 2 * _attention_flops(query, key, value)


@contextlib.contextmanager
def counting():
    """``with counting() as c: ...; c.get_total_flops()``, silent."""
    with FlopCounterMode(display=False) as counter:
        yield counter


def backbone_flops(backbone: Backbone) -> int:
    """FLOPs of one frozen pass of one image."""
    tensors = itertools.chain(backbone.model.parameters(), backbone.model.buffers())
    x = torch.zeros(
        1, 3, backbone.input_size, backbone.input_size, device=next(tensors).device
    )  # APER's bn variant holds buffers only
    with counting() as c, autocast(x.device, backbone.precision):
        backbone.features(x)
    return c.get_total_flops()


def _backbone_like(model: nn.Module, backbone: Backbone | None) -> list[nn.Module]:
    if backbone is None:
        return []
    kind = type(backbone.model)
    return [m for m in model.modules() if type(m) is kind]


def _tensors(obj, seen: set[int]) -> int:
    """numel of every tensor reachable in plain containers (plugin state)."""
    if isinstance(obj, torch.Tensor):
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        return obj.numel()
    if isinstance(obj, dict):
        return sum(_tensors(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensors(v, seen) for v in obj)
    data = getattr(obj, "data", None)  # Avalanche ParamData
    return _tensors(data, seen) if isinstance(data, torch.Tensor) else 0


def stored_params(strategy, backbone: Backbone | None) -> int:
    """Everything kept beyond the pretrained backbone (see module docstring)."""
    model: nn.Module = strategy.model
    inner = {id(p) for m in _backbone_like(model, backbone) for p in m.parameters()}
    inner |= {id(b) for m in _backbone_like(model, backbone) for b in m.buffers()}
    seen: set[int] = set(inner)
    total = sum(_tensors(t, seen) for t in (*model.parameters(), *model.buffers()))
    for plugin in strategy.plugins:
        if isinstance(plugin, Bookkeeping):
            continue
        total += sum(_tensors(v, seen) for v in vars(plugin).values())
    return total


def trainable_params(strategy) -> int:
    return sum(p.numel() for p in strategy.model.parameters() if p.requires_grad)


def inference_flops(
    strategy, backbone: Backbone, pass_flops: Callable[[Backbone], int] = backbone_flops
) -> int:
    """FLOPs to classify one test image with everything stored so far; ``pass_flops``
    counts a frozen pass of a backbone whose features a features method reads."""
    model: nn.Module = strategy.model
    features_only = spec_of(type(strategy)).inputs in (Inputs.FEATURES, Inputs.ADAPTED_FEATURES)
    passes = strategy.feature_backbones(backbone) if features_only else []
    device = next(iter(model.parameters()), torch.zeros(0)).device
    if features_only:
        x = torch.zeros(1, sum(b.dim for b in passes), device=device)
    else:
        x = torch.zeros(1, 3, backbone.input_size, backbone.input_size, device=device)
    was_training = model.training
    model.eval()
    with counting() as c, torch.no_grad(), autocast(device, backbone.precision):
        model(x)
    model.train(was_training)
    return c.get_total_flops() + sum(pass_flops(b) for b in passes)


class TrainFlops(Bookkeeping, Stateful, SupervisedPlugin):
    """Avalanche plugin: FLOPs per sample of the first training step of each task
    (forward + backward as the strategy really runs them). Bookkeeping: it measures
    the method and is not part of what it stores.

    ``stop_after_first`` ends each task after that step (``cl-bench account``).
    """

    state_attrs = ("per_sample",)

    def __init__(self, stop_after_first: bool = False) -> None:
        super().__init__()
        self.per_sample: list[float] = []
        self.stop_after_first = stop_after_first
        self._counter = None

    def before_training_exp(self, strategy, **kwargs) -> None:
        self._first = True

    def before_training_iteration(self, strategy, **kwargs) -> None:
        if self._first:
            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()

    def after_update(self, strategy, **kwargs) -> None:
        if self._first and self._counter is not None:
            self._counter.__exit__(None, None, None)
            self.per_sample.append(self._counter.get_total_flops() / len(strategy.mb_y))
            self._counter, self._first = None, False
            if self.stop_after_first:
                strategy.stop_training()
