"""What a per-task checkpoint saves of a strategy and its plugins, and how it is put
back, so that a run killed between tasks resumes with exactly the state an
uninterrupted run has at that point (the file itself: :mod:`cl_bench.engine.checkpoint`).
A method declares it by deriving from :class:`Resumable`; its plugins that keep state
derive from :class:`Stateful`; a model that grows derives from :class:`Regrows`.

A strategy's state (:class:`Resumable`) is its model's state dict with each
parameter's ``requires_grad`` (which modules are frozen is state too), the
attributes it names in ``state_attrs`` (dotted paths to what the model keeps
outside its parameters: class masks, task counters), Avalanche's clock (EWC reads
its task counter) and the state of every :class:`Stateful` plugin (the recorder's
rows, EWC's importances and anchors). Optimizers and schedulers are not saved:
every strategy here builds them afresh at each task
(:class:`cl_bench.strategies.blocks.per_task.PerTaskTemplate`), so none outlives a task.

Grown structure is rebuilt from the saved shapes before loading: a parameter whose
saved shape differs (a cosine classifier's rows) takes the saved shape, and a
:class:`Regrows` model first adds the submodules the state dict names (TOSCA's
per-task modules).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch


def _owner(obj: Any, path: str) -> tuple[Any, str]:
    *parents, name = path.split(".")
    for parent in parents:
        obj = getattr(obj, parent)
    return obj, name


def to_device(obj: Any, device: torch.device) -> Any:
    """``obj`` with every tensor in its dicts, lists and tuples moved to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


class Stateful:
    """An object whose state is the attributes named in ``state_attrs`` (dotted paths
    from the object; plain values, lists and tensors, saved as copies)."""

    state_attrs: tuple[str, ...] = ()

    def checkpoint_state(self) -> dict[str, Any]:
        return {path: copy.deepcopy(getattr(*_owner(self, path))) for path in self.state_attrs}

    def restore_state(self, state: dict[str, Any]) -> None:
        if set(state) != set(self.state_attrs):
            raise KeyError(
                f"{type(self).__name__}: saved attributes {sorted(state)} are not "
                f"{sorted(self.state_attrs)}"
            )
        for path, value in state.items():
            setattr(*_owner(self, path), value)


class Regrows:
    """Model mixin: a model that adds submodules during a run (one per task) and rebuilds
    them from a saved state dict before the dict is loaded into it."""

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        """Add the submodules that ``state`` (a state dict of this model) names and this
        model lacks, so that loading it is strict."""


def plugin_key(plugin: object) -> str:
    return type(plugin).__qualname__


class Resumable(Stateful):
    """Strategy mixin (an Avalanche template): ``checkpoint_state()`` after a task,
    ``restore_state(state)`` on a freshly built strategy of the same run. The model's
    tensors in the returned state are the live ones: serialise it before training on."""

    if TYPE_CHECKING:  # what the Avalanche template it is mixed into holds
        model: torch.nn.Module
        clock: Any
        plugins: list[Any]
        device: torch.device

    def checkpoint_state(self) -> dict[str, Any]:
        model = self.model
        return {
            "attrs": super().checkpoint_state(),
            "model": model.state_dict(),
            "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
            "clock": {k: v for k, v in vars(self.clock).items() if isinstance(v, int)},
            "plugins": {
                plugin_key(p): p.checkpoint_state() for p in self.plugins if isinstance(p, Stateful)
            },
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Raises (KeyError, RuntimeError, ...) when the state does not fit this
        strategy; the strategy is then half-restored and must be built again."""
        model, saved = self.model, state["model"]
        if isinstance(model, Regrows):
            model.prepare_restore(saved)
        for name, param in model.named_parameters():
            if name in saved and saved[name].shape != param.shape:
                param.data = torch.empty(saved[name].shape, dtype=param.dtype, device=param.device)
        model.load_state_dict(saved)  # strict: a missing or unexpected entry raises
        for name, param in model.named_parameters():
            param.requires_grad_(state["requires_grad"][name])
        super().restore_state(state["attrs"])
        for name, value in state["clock"].items():
            setattr(self.clock, name, value)
        plugins = {plugin_key(p): p for p in self.plugins if isinstance(p, Stateful)}
        if set(plugins) != set(state["plugins"]):
            raise KeyError(f"saved plugins {sorted(state['plugins'])} are not {sorted(plugins)}")
        for key, plugin in plugins.items():
            plugin.restore_state(to_device(state["plugins"][key], self.device))
