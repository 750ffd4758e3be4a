"""The per-task logic L2P, DualPrompt and CODA-Prompt share, as an Avalanche strategy.

A method supplies a :class:`PromptModel` subclass (its prompts and how they
enter the frozen ViT) and names it in ``model_class``; this module does the
rest the same way for all three, as PILOT and the official codes do:

* one frozen ViT in memory: the runner's backbone wrapped by
  :class:`~cl_bench.backbones.prompted.PromptedViT`, run twice per image (query
  without prompts, then the prompted pass); the query is the backbone's frozen
  feature, so when the input transform is deterministic (test images; training
  images held in memory) the runner reads it from the feature cache and gives it
  with the batch: one query pass per image for the whole run, not per epoch and
  evaluation;
* a linear head over all ``n_classes`` of the scenario, masked as in
  :mod:`cl_bench.strategies.blocks.prompt_matching` (current task only in training, seen
  classes in evaluation);
* at each training experience: the model learns the task index and classes
  (``begin_task``), then a fresh optimizer and schedule (``per_task.make_optimizer``);
* loss = cross-entropy + the model's ``regularizer`` (minus the pull
  constraint, or the orthogonality penalty).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from cl_bench.backbones.base import Backbone
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract import EVAL_BATCH_SIZE, Inputs, MethodSpec, Schedule
from cl_bench.contract.memory import (
    FLOAT,
    Allocation,
    Workload,
    backward_pass,
    optimizer_moments,
)
from cl_bench.errors import UserError
from cl_bench.strategies.blocks.device_cache import DeviceCache
from cl_bench.strategies.blocks.per_task import AutocastForward, PerTaskTemplate
from cl_bench.strategies.blocks.prompt_matching import class_mask, mask_logits
from cl_bench.strategies.blocks.shared_vit import OnSharedViT

Normalize = Callable[[torch.Tensor], torch.Tensor]


def prompt_pool(params: dict, work: Workload) -> Allocation:
    """``pool_size`` prompts of the longest length, at each prompted layer, with the
    optimizer's moments."""
    length = max(v for k, v in params.items() if k.endswith("length"))
    layers = max([1, *(len(v) for k, v in params.items() if k.endswith("layers"))])
    pool = params["pool_size"] * length * layers * work.dim * FLOAT
    return Allocation(
        "the prompt pool and its optimizer state",
        pool * (1 + optimizer_moments(params)),
        "pool_size or the prompt length",
    )


class PromptModel(nn.Module):
    """Prompts + linear head on a frozen, shared :class:`PromptedViT`.

    Subclasses implement ``embed(x, q)``: the pre-logit feature of normalised
    images x given their query q, and set ``regularizer`` (training) and
    ``routing`` (evaluation; methods that route only, read by their strategy's
    :meth:`~cl_bench.contract.Method.routing`).
    """

    head_init = "timm"  # the ViT's own head init (truncated normal, std .02); "torch": nn.Linear's

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__()
        # Not a submodule: the frozen backbone belongs to the runner and is shared,
        # so it stays out of this model's parameter counts, state dict and train().
        self.__dict__["vit"] = vit
        self.normalize = normalize
        self.params = params
        self.head = nn.Linear(vit.dim, n_classes)
        if self.head_init == "timm":
            nn.init.trunc_normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)
        # plain tensors, not buffers: bookkeeping, not part of what the method stores;
        # replaced, never changed in place, so that their device copies follow them
        self.current = class_mask(n_classes, [])
        self.unseen = class_mask(n_classes, [])
        self.on_device = DeviceCache()
        self.task = 0
        self.regularizer = torch.zeros(())
        self.routing: torch.Tensor | None = None

    def begin_task(self, task: int, classes: list[int]) -> None:
        """Called before training task ``task`` on ``classes``; subclasses extend it."""
        self.task = task
        self.current = class_mask(len(self.current), classes)
        self.unseen = self.unseen & self.current

    def embed(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, query: torch.Tensor | None = None) -> torch.Tensor:
        """Images in [0, 1] -> masked logits over all classes. ``query``: the images'
        frozen [CLS] from the feature cache; computed here when not given."""
        x = self.normalize(x)
        if query is None:
            query = self.vit.query(x)
        logits = self.head(self.embed(x, query.to(x.device)))
        name = "current" if self.training else "unseen"
        mask = getattr(self, name)
        return mask_logits(logits, self.on_device.get(name, logits.device, (mask,), lambda: mask))


class PromptStrategy(OnSharedViT, AutocastForward, PerTaskTemplate):
    """Avalanche strategy around a :class:`PromptModel` (see the module docstring)."""

    # the runner passes the frozen queries from the feature cache
    spec = MethodSpec(
        inputs=Inputs.IMAGES_WITH_QUERY,
        trains_backbone=False,
        schedule=Schedule.PER_TASK,
        protocol=(EVAL_BATCH_SIZE,),
    )
    model_class: type[PromptModel] = PromptModel
    injects = "injects prompts into transformer blocks"
    state_attrs = ("model.task", "model.current", "model.unseen")

    @classmethod
    def check_params(cls, params: dict, backbone: Backbone) -> None:
        super().check_params(params, backbone)
        depth = len(backbone.model.blocks)
        lists = [k for k in params if k.endswith("layers")]
        for key in lists:
            outside = [b for b in params[key] if not (isinstance(b, int) and 0 <= b < depth)]
            if outside or len(set(params[key])) != len(params[key]):
                raise UserError(
                    f"{cls.__name__}: {key} = {params[key]} must list distinct "
                    f"block indices 0 to {depth - 1} of {backbone.name}."
                )
        if lists and not any(params[key] for key in lists):  # degenerate by construction
            raise UserError(
                f"{cls.__name__}: {' and '.join(f'{k} = []' for k in lists)} puts "
                "a prompt in no block, so only the head would train. Name at "
                f"least one block index (0 to {depth - 1}) in {' or '.join(lists)}."
            )

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """The prompt pool, and what the backward pass keeps: the prefixes (DualPrompt,
        CODA-Prompt) join the keys and values inside the attention of their layers, so
        gradients flow through every block after the lowest prefixed one."""
        prefixed = [i for k, v in params.items() if k.endswith("layers") for i in v]
        first = 1 + min(prefixed) if prefixed else work.blocks
        return [prompt_pool(params, work), backward_pass(work, params, first)]

    def forward_model(self) -> torch.Tensor:
        """Mini-batches are (images, labels, queries, task) when the runner gave the
        stream cached queries (one backbone pass per image for the whole run), else
        (images, labels, task) and the query pass runs here."""
        query = self.mbatch[2] if len(self.mbatch) == 4 else None
        return self.model(self.mb_x, query)

    def model_adaptation(self, model=None):
        model = self.model if model is None else model
        if self.is_training:
            classes = sorted(int(c) for c in self.experience.dataset.targets.uniques)
            model.begin_task(self.experience.current_experience, classes)
        return model.to(self.device)

    def criterion(self) -> torch.Tensor:
        loss = self._criterion(self.mb_output, self.mb_y)
        return loss + self.model.regularizer if self.is_training else loss
