"""TOSCA: Yildirim et al., "Unlocking [CLS] Features for Continual Post-Training"
(arXiv 2502.14762, TMLR 2026); the official code is github.com/muratonuryildirim/tosca
(models/tosca.py; its only commit, also public as the root commit of ladka6/tosca-eval).

Per task t a fresh LuCA_t is trained on the frozen final [CLS] feature x with
a shared cosine classifier over all seen classes,

    L = CE(sigma * cos(LuCA_t(x), W)) + l1 * sum |theta_t|,

then the rows of task t's classes are replaced by the class means of
LuCA_t(x). At test time every stored module sees the same x (one backbone
pass), and the module whose softmax has the lowest entropy predicts.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, vmap

from cl_bench.backbones.base import Backbone
from cl_bench.contract import AUGMENT_VIEWS, EVAL_BATCH_SIZE, Inputs, MethodSpec, Regrows, Schedule
from cl_bench.contract.memory import FLOAT, Allocation, Workload
from cl_bench.errors import UserError
from cl_bench.strategies.blocks.gathered_batches import GatheredTaskBalancedLoader
from cl_bench.strategies.blocks.heads import CosineClassifier, set_prototypes
from cl_bench.strategies.blocks.luca import SELECTION, LuCA, select_module
from cl_bench.strategies.blocks.per_task import PerTaskTemplate


class ToscaNet(Regrows, nn.Module):
    """Stored LuCA modules + the shared cosine classifier.

    Training uses the newest module; evaluation runs all modules on the same
    feature batch and keeps, per ``selection``, the lowest-entropy module's
    logits. ``routing`` holds the chosen module per sample of the last batch.
    """

    def __init__(
        self, dim: int, mlp_ratio: int, se_ratio: int, flow: str, selection: str, init: str
    ) -> None:
        super().__init__()
        self.dim, self.mlp_ratio, self.se_ratio, self.flow = dim, mlp_ratio, se_ratio, flow
        self.selection, self.init = selection, init
        self.luca = nn.ModuleList()
        self.classifier = CosineClassifier(dim)
        self.routing: torch.Tensor | None = None
        self._stacked: tuple[int, dict[str, torch.Tensor]] | None = None

    def add_task(self, n_total_classes: int) -> None:
        """Freeze old modules, add a fresh one, grow the classifier."""
        self._stacked = None
        module = LuCA(self.dim, self.mlp_ratio, self.se_ratio, self.flow)
        # "official": task 0 keeps PyTorch's default Linear init (the official code
        # re-initialises only after a task); "xavier": every task starts alike.
        if self.init == "xavier" or len(self.luca) > 0:
            module.reset_parameters()
        self.luca.requires_grad_(False)
        self.luca.append(module.to(self.classifier.weight.device))
        self.classifier.grow(n_total_classes)

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        """Add the modules a per-task checkpoint's state dict holds (their values,
        the classifier's rows and which modules are frozen are loaded after this)."""
        self._stacked = None
        count = len({name.split(".")[1] for name in state if name.startswith("luca.")})
        while len(self.luca) < count:
            self.luca.append(LuCA(self.dim, self.mlp_ratio, self.se_ratio, self.flow))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.luca[-1](x)

    def all_modules(self, x: torch.Tensor) -> torch.Tensor:
        """(T, B, d): every stored module on the same features, as one batched call
        over the modules' stacked weights (cached until a module changes)."""
        if self._stacked is None or self._stacked[0] != len(self.luca):
            states = [m.state_dict() for m in self.luca]
            stacked = {k: torch.stack([st[k].detach() for st in states]) for k in states[0]}
            self._stacked = (len(self.luca), stacked)
        template = self.luca[0]

        def one(state: dict, inputs: torch.Tensor) -> torch.Tensor:
            return functional_call(template, state, (inputs,))

        return vmap(one, in_dims=(0, None))(self._stacked[1], x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self._stacked = None  # the newest module is changing
            return self.classifier(self.embed(x))
        logits = self.classifier(self.all_modules(x))
        choice = select_module(logits, self.selection)
        self.routing = choice
        return logits[choice, torch.arange(x.shape[0], device=x.device)]


def add_l1_gradient(params, l1: float) -> None:
    """Add the gradient of ``l1 * sum |p|`` to each parameter's gradient (autograd's
    ``abs`` gradient: the sign, 0 at 0)."""
    for p in params:
        if p.grad is None:
            p.grad = p.detach().sgn() * l1
        else:
            p.grad.add_(p.detach().sgn(), alpha=l1)


class Tosca(PerTaskTemplate):
    """TOSCA as an Avalanche strategy over frozen-feature experiences."""

    spec = MethodSpec(
        inputs=Inputs.FEATURES,
        trains_backbone=False,
        schedule=Schedule.PER_TASK,
        protocol=(SELECTION, AUGMENT_VIEWS, EVAL_BATCH_SIZE),
    )

    def __init__(
        self,
        *,
        params: dict,
        backbone: Backbone,
        n_classes: int,
        device: torch.device,
        plugins: list,
        evaluator,
    ) -> None:
        model = ToscaNet(
            backbone.dim,
            params["mlp_ratio"],
            params["se_ratio"],
            params["flow"],
            params["selection"],
            params["init"],
        )
        super().__init__(
            params=params, model=model, device=device, plugins=plugins, evaluator=evaluator
        )

    @classmethod
    def check_params(cls, params: dict, backbone: Backbone) -> None:
        """LuCA's layers are d // ratio wide: a ratio above the feature width d builds
        zero-width layers, a model that is degenerate by construction (it trains
        nothing, yet its run would finish with a number)."""
        for key, layer in (("mlp_ratio", "adapter"), ("se_ratio", "calibrator")):
            if backbone.dim // params[key] < 1:
                raise UserError(
                    f"tosca.{key} = {params[key]} leaves LuCA's {layer} with no unit: its "
                    f"width is the feature width over the ratio, {backbone.dim} // "
                    f"{params[key]} = 0 on {backbone.name}. Set --set tosca.{key} to at most "
                    f"{backbone.dim} (the paper uses 16)."
                )

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """K cached augmented views of every training feature (fp16, in RAM with the
        other cached features), and one LuCA per task."""
        d = work.dim
        luca = 2 * d * (d // params["mlp_ratio"]) + 2 * d * (d // params["se_ratio"])
        return [
            Allocation(
                f"{params['augment_views']} augmented views of every training feature",
                params["augment_views"] * work.train_images * d * 2,
                "augment_views",
                host=True,
            ),
            Allocation(
                "one LuCA module per task",
                work.n_tasks * luca * FLOAT,
                "mlp_ratio",
            ),
        ]

    def model_adaptation(self, model=None):
        model = self.model if model is None else model
        if self.is_training:
            model.add_task(max(self.experience.dataset.targets.uniques) + 1)
        return model.to(self.device)

    def make_train_dataloader(
        self,
        num_workers=0,
        shuffle=True,
        pin_memory=None,
        persistent_workers=False,
        drop_last=False,
        **kwargs,
    ) -> None:
        """Avalanche's task-balanced loader, its batches gathered from the experience's
        features read once (:mod:`~cl_bench.strategies.blocks.gathered_batches`); with
        ``augment_views`` an epoch's samples are that epoch's views, read per epoch by
        Avalanche's own loader."""
        if self.params.get(AUGMENT_VIEWS.key) or num_workers:
            return super().make_train_dataloader(
                num_workers=num_workers,
                shuffle=shuffle,
                pin_memory=pin_memory,
                persistent_workers=persistent_workers,
                drop_last=drop_last,
                **kwargs,
            )
        args = self._obtain_common_dataloader_parameters(
            batch_size=self.train_mb_size,
            num_workers=0,
            shuffle=shuffle,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            drop_last=drop_last,
        )
        self.dataloader = GatheredTaskBalancedLoader(
            self.adapted_dataset, oversample_small_groups=True, **args
        )

    def routing(self) -> torch.Tensor | None:
        """The lowest-entropy module per sample of the last evaluated batch."""
        return self.model.routing

    def criterion(self) -> torch.Tensor:
        """CE, plus in training the L1 term's value; its gradient is added in
        :meth:`backward`."""
        loss = self._criterion(self.mb_output, self.mb_y)
        if self.is_training:
            with torch.no_grad():
                penalty = sum(p.abs().sum() for p in self.model.luca[-1].parameters())
            loss = loss + self.params["l1"] * penalty
        return loss

    def backward(self) -> None:
        """The loss's backward pass, then the L1 term's gradient ``l1 * sign(theta)``
        added to each parameter's gradient by hand. It is bit for bit what autograd adds
        through ``|theta|`` (``l1 * sign`` is exact, and the sum of two gradients does
        not depend on their order; tested), with no graph through the parameters' absolute
        values, so a step does less work (bench figure loop-overhead times the loop)."""
        super().backward()
        if self.is_training:
            add_l1_gradient(self.model.luca[-1].parameters(), self.params["l1"])

    def _after_training_exp(self, **kwargs) -> None:
        self.model.eval()
        set_prototypes(
            self.model.classifier, self.experience.dataset.eval(), self.model.embed, self.device
        )
        super()._after_training_exp(**kwargs)

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """Every task adds a LuCA module and its classes' rows (account)."""
        return 1
