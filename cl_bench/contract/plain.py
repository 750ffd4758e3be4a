"""A plain Avalanche strategy, driven through its card.

A user's ``SupervisedTemplate`` subclass that knows nothing about cl-bench (no
:class:`~cl_bench.contract.Method` base, no ``spec``) runs under ``cl-bench run``
when its method card says, in a ``contract:`` block, what the class itself would
otherwise declare, and which model to build::

    strategy: my_module:MyNaive            # SupervisedTemplate(model=..., optimizer=..., ...)
    contract:
      inputs: features                     # features | images | images+query
      trains_backbone: false
      schedule: per-task                   # per-task | joint
      model: my_module:make_model          # (backbone, n_classes, params) -> torch.nn.Module
    defaults: {epochs: 5, batch_size: 32, optimizer: sgd, lr: 0.1, momentum: 0.9}

cl-bench then drives a subclass that mixes :class:`Method` (with the card's spec)
into the user's class, and builds it as an Avalanche user would: the model from the
factory, the optimizer from the card's ``optimizer`` (sgd | adam | adamw), ``lr``
and optional ``momentum`` and ``weight_decay`` (as in the shipped cards),
cross-entropy, ``train_mb_size = batch_size``, ``train_epochs = epochs``,
``eval_mb_size = eval_batch_size`` (default: ``batch_size``; the one protocol setting
it declares), plus the run's device, plugins and evaluator, all passed as the
template's keyword arguments. The card's
``backbones:`` (any | vit | cnn, default any) is the class's ``backbones``. Such a
class is not checkpointed (a killed run starts over).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avalanche.training.templates import SupervisedTemplate
from torch import nn

from cl_bench.contract.optimizer import make_optimizer
from cl_bench.contract.protocol import EVAL_BATCH_SIZE
from cl_bench.contract.spec import BACKBONE_KINDS, Inputs, Method, MethodSpec, Schedule
from cl_bench.errors import UserError

if TYPE_CHECKING:
    import torch
    from avalanche.training.plugins import EvaluationPlugin

    from cl_bench.backbones.base import Backbone

CONTRACT_KEYS = ("inputs", "trains_backbone", "schedule", "model")
NEEDED_SETTINGS = ("epochs", "batch_size", "optimizer", "lr")
# under the card's own rules: a bad --set of these is refused before anything runs
PLAIN_RULES: dict[str, Any] = {
    "bounds": {
        "epochs": [1, None],
        "batch_size": [1, None],
        "eval_batch_size": [1, None],
        "momentum": [0, 1],
        "weight_decay": [0, None],
    },
    "positive": ["lr"],
    "choices": {"optimizer": ["sgd", "adam", "adamw"]},
}


def driven_class(
    cls: object,
    block: Any,
    defaults: dict[str, Any],
    card: Path,
    load: Callable[[str], object],
    backbones: Any = "any",
) -> type:
    """The :class:`Method` subclass of ``cls`` that cl-bench drives, from the card's
    ``contract:`` ``block`` (``load`` imports its ``model`` factory) and the card's
    ``backbones:`` (the backbones it runs on); a ``UserError`` naming the card for
    anything the block or the defaults lack."""
    if isinstance(cls, type) and issubclass(cls, Method):
        raise UserError(
            f"{card}: {cls.__qualname__} derives from cl_bench.contract.Method "
            "and declares its own contract; drop the card's `contract:` block "
            "(it is for plain Avalanche strategies only)."
        )
    if not (isinstance(cls, type) and issubclass(cls, SupervisedTemplate)):
        raise UserError(
            f"{card}: a `contract:` block drives an Avalanche SupervisedTemplate "
            f"subclass; {cls!r} is not one."
        )
    if not isinstance(block, dict) or sorted(block) != sorted(CONTRACT_KEYS):
        raise UserError(
            f"{card}: `contract:` must be a mapping with exactly the keys "
            f"{', '.join(CONTRACT_KEYS)}; got {block!r}."
        )
    spec = _spec(block, card)
    missing = [k for k in NEEDED_SETTINGS if k not in defaults]
    if missing:
        raise UserError(
            f"{card}: a plain Avalanche strategy is built from the settings "
            f"{', '.join(NEEDED_SETTINGS)}; `defaults:` lacks "
            f"{', '.join(missing)}."
        )
    if "scheduler" in defaults:
        raise UserError(
            f"{card}: a plain Avalanche strategy gets its optimizer only, no "
            "`scheduler` setting: schedule the learning rate inside the class "
            "(e.g. with Avalanche's LRSchedulerPlugin) and drop the setting."
        )
    if backbones not in BACKBONE_KINDS:
        raise UserError(
            f"{card}: `backbones:` is one of {', '.join(BACKBONE_KINDS)}, not {backbones!r}."
        )
    factory = _factory(block["model"], card, load)
    return _wrap(cls, spec, factory, block["model"], backbones)


def _spec(block: dict[str, Any], card: Path) -> MethodSpec:
    try:
        inputs, schedule = Inputs(block["inputs"]), Schedule(block["schedule"])
    except ValueError:
        raise UserError(
            f"{card}: contract inputs {block['inputs']!r} / schedule {block['schedule']!r}: "
            f"inputs is one of {', '.join(i.value for i in Inputs)}, schedule one of "
            f"{', '.join(s.value for s in Schedule)}."
        ) from None
    if not isinstance(block["trains_backbone"], bool):
        raise UserError(
            f"{card}: contract trains_backbone must be true or false, not "
            f"{block['trains_backbone']!r}."
        )
    return MethodSpec(
        inputs=inputs,
        trains_backbone=block["trains_backbone"],
        schedule=schedule,
        protocol=(EVAL_BATCH_SIZE,),
    )


def _factory(path: Any, card: Path, load: Callable[[str], object]) -> Callable[..., object]:
    if not isinstance(path, str) or path.count(":") != 1:
        raise UserError(f'{card}: contract model must be "package.module:function", not {path!r}.')
    try:
        factory = load(path)
    except (ImportError, AttributeError) as e:
        raise UserError(
            f"{card}: contract model {path} cannot be imported ({e}). A module "
            "is found among the installed packages, or beside the card."
        ) from None
    if not callable(factory):
        raise UserError(f"{card}: contract model {path} is not callable.")
    return factory


@functools.cache
def _wrap(
    cls: type[SupervisedTemplate],
    spec: MethodSpec,
    factory: Callable[..., object],
    where: str,
    backbones: str,
) -> type:
    """One class per (user class, contract, factory): the runner's checks (issubclass,
    spec_of) see the same class at every call."""

    def __init__(
        self: Method,
        *,
        params: dict[str, Any],
        backbone: Backbone,
        n_classes: int,
        device: torch.device | str,
        plugins: list[Any],
        evaluator: EvaluationPlugin,
    ) -> None:
        model = factory(backbone, n_classes, params)
        if not isinstance(model, nn.Module):
            raise UserError(
                f"The model factory {where} returned a {type(model).__name__}, "
                "not a torch.nn.Module."
            )
        optimizer, _ = make_optimizer(params, model.parameters())
        cls.__init__(
            self,
            model=model,
            optimizer=optimizer,
            criterion=nn.CrossEntropyLoss(),
            train_mb_size=params["batch_size"],
            train_epochs=params["epochs"],
            eval_mb_size=params.get("eval_batch_size", params["batch_size"]),
            device=device,
            plugins=plugins,
            evaluator=evaluator,
        )

    return type(
        cls.__name__,
        (Method, cls),
        {
            "spec": spec,
            "backbones": backbones,
            "__init__": __init__,
            "__module__": __name__,
            "__doc__": f"{cls.__module__}:{cls.__qualname__} driven by cl-bench ({spec}).",
        },
    )
