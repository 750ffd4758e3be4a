"""The optimizer and per-epoch schedule that a method card's settings name
(``optimizer``, ``lr``, ``momentum``, ``weight_decay``, ``scheduler``, ``eta_min``):
what the shipped strategies and a plain Avalanche strategy's ``contract:`` block
(:mod:`cl_bench.contract.plain`) are built with."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import torch
from torch import nn

from cl_bench.errors import UserError


def make_optimizer(
    params: dict[str, Any], parameters: Iterable[nn.Parameter] | Iterable[dict[str, Any]]
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
    """Optimizer (``optimizer``: sgd | adam | adamw) and per-epoch scheduler
    (``scheduler``: cosine | constant) from a method's resolved params. ``parameters``:
    parameters, or torch's parameter groups (dicts, e.g. with their own ``lr``);
    frozen parameters are left out."""
    # which of the two: every item says the same (mypy cannot carry the union through list())
    parameters = cast("Sequence[Any]", list(parameters))
    groups = {isinstance(p, dict) for p in parameters}
    if len(groups) > 1:
        raise TypeError(
            "make_optimizer takes parameters or parameter groups (dicts with 'params'), "
            "not a mix of both; put the loose parameters in a group of their own."
        )
    if groups == {True}:
        parameters = [
            dict(g, params=[p for p in g["params"] if p.requires_grad]) for g in parameters
        ]
    else:
        parameters = [p for p in parameters if p.requires_grad]
    name, lr, wd = params["optimizer"], params["lr"], params.get("weight_decay", 0.0)
    opt: torch.optim.Optimizer
    if name == "sgd":
        opt = torch.optim.SGD(
            parameters, lr=lr, momentum=params.get("momentum", 0.9), weight_decay=wd
        )
    elif name == "adam":
        opt = torch.optim.Adam(parameters, lr=lr, weight_decay=wd)
    elif name == "adamw":
        opt = torch.optim.AdamW(parameters, lr=lr, weight_decay=wd)
    else:
        raise UserError(f'optimizer "{name}" is not supported; use sgd, adam or adamw.')
    sched = params.get("scheduler", "constant")
    if sched == "cosine":
        return opt, torch.optim.lr_scheduler.CosineAnnealingLR(
            opt, T_max=params["epochs"], eta_min=params.get("eta_min", 0.0)
        )
    if sched == "constant":
        return opt, None
    raise UserError(f'scheduler "{sched}" is not supported; use cosine or constant.')
