"""What the adapter methods (EASE, MOS) share: one adapter set per task in the
runner's frozen ViT, on images.

* the backbone is the runner's, wrapped by
  :class:`~cl_bench.backbones.prompted.PromptedViT` (no copy; activation
  checkpointing through ``checkpoint_blocks``); the adapter sets live in the
  method's model (:class:`AdapterModel`), so they are what it stores, and one set
  is active per backbone pass (:mod:`cl_bench.backbones.adapters`);
* adapters on every block's MLP, width ``ffn``, scale 0.1, dropout 0.1, "lora"
  init: the EASE and MOS configs (``get_backbone`` in both official repositories);
* at each training experience the model learns the task index and its classes
  (``begin_task``: ``task_of_class``, the task of every class row, -1 for classes
  not seen yet, and ``current``, the classes being trained), then the optimizer and
  schedule are rebuilt from the card
  (:class:`~cl_bench.strategies.blocks.per_task.PerTaskTemplate`);
* logits cover all classes of the run, -inf where a class may not be predicted
  (:meth:`AdapterModel.spread`); the columns and masks a forward needs come from
  :meth:`AdapterModel.cached`, on the forward's device, made once per task.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from cl_bench.backbones.adapters import AdapterSet
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract import EVAL_BATCH_SIZE, Inputs, MethodSpec, Regrows, Schedule
from cl_bench.contract.memory import Allocation, Workload, adapter_sets, backward_pass
from cl_bench.strategies.blocks.device_cache import DeviceCache
from cl_bench.strategies.blocks.per_task import AutocastForward, PerTaskTemplate
from cl_bench.strategies.blocks.shared_vit import OnSharedViT

Normalize = Callable[[torch.Tensor], torch.Tensor]


class AdapterModel(Regrows, nn.Module):
    """Adapter sets (``sets``, one per task) on a frozen, shared PromptedViT."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__()
        # Not a submodule: the frozen backbone belongs to the runner and is shared.
        self.__dict__["vit"] = vit
        self.normalize = normalize
        self.n_classes = n_classes
        self.params = params
        self.sets = nn.ModuleList([self.new_set()])  # the first task's, built with the model
        self.task = -1
        # plain tensors, saved through state_attrs: bookkeeping, not what the method stores;
        # replaced, never changed in place, so that what ``cached`` made from them follows
        self.task_of_class = torch.full((0,), -1, dtype=torch.long)
        self.current = torch.zeros(0, dtype=torch.long)
        self.on_device = DeviceCache()

    def new_set(self) -> AdapterSet:
        """A fresh set on every block, as both official backbones build it (the
        first one with the model, as they do)."""
        return AdapterSet(self.vit.dim, self.params["ffn"], range(self.vit.depth))

    def begin_task(self, task: int, classes: list[int]) -> None:
        """Called before training task ``task`` on ``classes``; subclasses extend it."""
        self.task = task
        self.current = torch.tensor(classes, dtype=torch.long)
        rows = max(len(self.task_of_class), max(classes) + 1)
        grown = torch.full((rows,), -1, dtype=torch.long)
        grown[: len(self.task_of_class)] = self.task_of_class
        grown[self.current] = task
        self.task_of_class = grown

    @property
    def seen(self) -> torch.Tensor:
        """The class ids seen so far (the current task's included), ascending."""
        return (self.task_of_class >= 0).nonzero().squeeze(1)

    @property
    def order(self) -> torch.Tensor:
        """The seen class ids in classifier order: task by task, ascending within one."""
        return torch.cat(
            [(self.task_of_class == k).nonzero().squeeze(1) for k in range(self.task + 1)]
        )

    def cached(
        self,
        name: str,
        device: torch.device,
        make: Callable[[], torch.Tensor] | None = None,
        *also: object,
    ) -> torch.Tensor:
        """``make()`` (default: the attribute ``name``, e.g. ``current``, ``seen``,
        ``order``) on ``device``, made again only when the task bookkeeping, the number
        of adapter sets or one of ``also`` changed: once per task, not per batch."""
        sources = (self.task_of_class, self.current, len(self.sets), *also)
        return self.on_device.get(name, device, sources, make or (lambda: getattr(self, name)))

    def spread(self, values: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """(B, n_classes) logits: ``values`` (B, len(columns)) in ``columns``, -inf
        elsewhere."""
        out = values.new_full((values.shape[0], self.n_classes), float("-inf"))
        out[:, columns.to(values.device)] = values
        return out

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        """Add the sets a per-task checkpoint's state dict holds (values loaded after)."""
        count = len({name.split(".")[1] for name in state if name.startswith("sets.")})
        device = next(iter(state.values())).device if state else None
        while len(self.sets) < count:
            self.sets.append(self.new_set().to(device))

    def cls(self, x: torch.Tensor, adapters: AdapterSet | None) -> torch.Tensor:
        """Final-norm [CLS] of normalised images with ``adapters`` active (None: the
        frozen pretrained model)."""
        return self.vit(x, adapters=adapters).cls


class AdapterStrategy(OnSharedViT, AutocastForward, PerTaskTemplate):
    """Avalanche strategy around an :class:`AdapterModel` (module docstring)."""

    spec = MethodSpec(
        inputs=Inputs.IMAGES,
        trains_backbone=False,
        schedule=Schedule.PER_TASK,
        protocol=(EVAL_BATCH_SIZE,),
    )
    model_class: type[AdapterModel] = AdapterModel
    injects = "puts adapters into transformer blocks"
    state_attrs = ("model.task", "model.task_of_class", "model.current")

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """One adapter set per task, all kept (and run at test time), and what the
        backward pass keeps: the adapters sit beside every block's MLP, so gradients
        flow through every block after the first."""
        return [
            adapter_sets(work, params["ffn"], work.n_tasks, "ffn"),
            backward_pass(work, params, 1),
        ]

    def model_adaptation(self, model=None):
        model = self.model if model is None else model
        if self.is_training:
            classes = sorted(int(c) for c in self.experience.dataset.targets.uniques)
            model.begin_task(self.experience.current_experience, classes)
        return model.to(self.device)
