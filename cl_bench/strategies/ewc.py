"""EWC: Kirkpatrick et al., "Overcoming catastrophic forgetting in neural
networks", PNAS 2017; online variant from Schwarz et al., "Progress &
Compress", ICML 2018.

Fine-tuning as in Finetune, plus a quadratic pull towards the parameters
theta* that solved the earlier tasks, weighted by their importance F (a
diagonal empirical Fisher). As Avalanche's EWCPlugin computes it (no 1/2 in
front of lambda, unlike the paper's lambda/2):

    L = CE(x, y) + lambda * sum_i F_i (theta_i - theta*_i)^2
    F_i = 1/B sum_b (dl_b / dtheta_i)^2   (l_b: mean CE of minibatch b of the
                                           task just trained, B minibatches)

``mode: online`` keeps one (F, theta*) pair whatever the number of tasks:
after task t, F <- gamma F + F_t and theta* <- theta_t (gamma = decay_factor).
``mode: separate`` keeps one pair per task and sums one penalty per task.

The importances are computed here rather than by Avalanche's
``EWCPlugin.compute_importances`` (the same sums, in the same order, so fp32 gives the
same bits): over the run's loader settings (:func:`cl_bench.contract.method_loader`;
Avalanche's builds a loader of its own with workers only), and under the strategy's
precision (bf16 autocast where training runs in it; Avalanche's pass runs in fp32,
several times slower on a GPU than the training it follows).

``importance_max`` bounds F_t elementwise (F_t <- min(F_t, importance_max)), as
PyCIL's EWC does (``fishermax`` 1e-4); Avalanche has no bound. Without one,
the head's F (squared gradients on O(1) features) reaches ~3, and the penalty's
curvature 2 lambda F exceeds what SGD with momentum can follow unless
lr < 2 (1 + momentum) / (2 lambda F): at lambda 500, lr 1e-2 diverged to NaN
on ViT-Tiny. Bounded, each task adds at most 2 lambda importance_max = 0.1.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from avalanche.training.plugins import EWCPlugin
from avalanche.training.utils import ParamData
from torch import nn

from cl_bench.backbones.base import Backbone, autocast
from cl_bench.contract import Allocation, Stateful, Workload, method_loader
from cl_bench.contract.memory import FLOAT
from cl_bench.strategies.blocks.backbone_copy import FinetuneTemplate


def _trainable_only(model: nn.Module, data: dict) -> dict:
    keep = {name for name, p in model.named_parameters() if p.requires_grad}
    return {name: value for name, value in data.items() if name in keep}


class TrainableEWCPlugin(Stateful, EWCPlugin):
    """EWCPlugin that keeps importances and anchors of trainable parameters only.

    Avalanche's plugin stores an importance and an anchor copy for every
    parameter of the model, frozen ones included (their importance is zero and
    they never move, so they add nothing to the penalty but memory and time).
    Dropping them after each computation keeps the stored state at
    2 x 4 bytes x trainable parameters; the penalty loop skips parameters with
    no anchor, so nothing else changes.
    """

    stores = ("importances", "saved_params")

    def __init__(
        self,
        ewc_lambda: float,
        mode: str,
        decay_factor: float | None,
        importance_max: float | None,
        precision: str = "fp32",
    ) -> None:
        super().__init__(ewc_lambda, mode=mode, decay_factor=decay_factor)
        self.importance_max, self.precision = importance_max, precision

    def compute_importances(
        self, model, criterion, optimizer, dataset, device, batch_size, num_workers: int = 0
    ) -> dict:
        """F_t of the trainable parameters: the mean over ``dataset``'s minibatches (in
        eval mode) of each squared minibatch-mean gradient, clamped at
        ``importance_max``. The forward runs under ``self.precision``'s autocast, the
        loss and backward in fp32, as in training; ``num_workers`` (Avalanche's
        argument) is not read: the run's loader settings decide."""
        del num_workers
        model.eval()
        trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        sums = {name: torch.zeros_like(p) for name, p in trainable}
        loader = method_loader(dataset, batch_size, collate_fn=getattr(dataset, "collate_fn", None))
        for x, y, *_ in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            with autocast(device, self.precision):
                out = model(x).float()
            criterion(out, y).backward()
            with torch.no_grad():
                for name, p in trainable:
                    if p.grad is not None:
                        sums[name] += p.grad.pow(2)
        model.train()
        importances = {}
        for name, total in sums.items():
            total /= float(len(loader))
            if self.importance_max is not None:
                total.clamp_(max=self.importance_max)
            importances[name] = ParamData(name, init_tensor=total, device=total.device)
        return importances

    def after_training_exp(self, strategy, **kwargs) -> None:
        super().after_training_exp(strategy, **kwargs)
        t = strategy.clock.train_exp_counter
        self.saved_params[t] = _trainable_only(strategy.model, self.saved_params[t])

    def stored_bytes(self) -> int:
        """Bytes held in importances and anchors (all tasks kept)."""
        return sum(
            d.data.numel() * d.data.element_size()
            for store in (self.importances, self.saved_params)
            for per_task in store.values()
            for d in per_task.values()
        )

    def checkpoint_state(self) -> dict:
        """Importances and anchors per task as plain tensors (a per-task checkpoint)."""
        return {
            store: {
                t: {name: d.data for name, d in per_task.items()}
                for t, per_task in getattr(self, store).items()
            }
            for store in self.stores
        }

    def restore_state(self, state: dict) -> None:
        for store in self.stores:
            setattr(
                self,
                store,
                defaultdict(
                    dict,
                    {
                        t: {
                            name: ParamData(name, init_tensor=value, device=value.device)
                            for name, value in per_task.items()
                        }
                        for t, per_task in state[store].items()
                    },
                ),
            )


class EWC(FinetuneTemplate):
    """Fine-tuning of a private backbone copy + head, with the EWC penalty."""

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """Beside fine-tuning's: an importance and an anchor of every trained weight, one
        pair (``mode: online``) or one per task (``separate``)."""
        pairs = 1 if params["mode"] == "online" else work.n_tasks
        return [
            *super().memory(params, work),
            Allocation(
                f"{pairs} importance and anchor pair(s) of the trained backbone",
                2 * pairs * work.parameters * FLOAT,
                "mode (online keeps one pair)",
            ),
        ]

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
        online = params["mode"] == "online"
        self.ewc = TrainableEWCPlugin(
            params["ewc_lambda"],
            mode=params["mode"],
            decay_factor=params["decay_factor"] if online else None,
            importance_max=params["importance_max"],
            precision=backbone.precision,
        )
        # first, so that the Fisher pass after each task is inside the Recorder's
        # training time (its after_training_exp runs after this plugin's)
        super().__init__(
            params=params,
            backbone=backbone,
            n_classes=n_classes,
            device=device,
            plugins=[self.ewc, *plugins],
            evaluator=evaluator,
        )

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """Every task after the first trains under the penalty of the ones before
        (account)."""
        return 1
