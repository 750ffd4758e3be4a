"""LCA: Tran, Vargas, Than, "LCA: Local Classifier Alignment for Continual Learning"
(ICLR 2026, arXiv 2603.09888). Read from the authors' code (tungts1101/LCA at 3e6670b:
``lca.py`` ``Learner``, ``helper.py`` ``Model``, ``ContinualLinear``, ``merge``;
``backbone/vit_adapter.py``); departures in methods/lca.yaml.

One adapter set A (AdaptFormer on every block's MLP, width ``ffn``,
:mod:`cl_bench.backbones.adapters`) is trained through all tasks, and beside it the
set it started from, A_base (the fresh set of the first task). Per task t a new
linear head W_t (no bias, trunc normal std 0.02) over the task's classes.

Task t: A (which holds the merge of the earlier tasks) and W_t are trained with
cross-entropy over the task's classes on f = final-norm [CLS] under A. Then, on the
just-trained A, the mean and covariance (+ 1e-4 I) of f per class of task t (eval
transform; earlier classes are never recomputed). Then A is merged with TIES
(:mod:`cl_bench.strategies.blocks.ties`), incrementally, on task vectors from A_base:

    A <- ties_merge(A_base, [A_merged(t-1), A_trained(t)], topk, merge_coef)   (t > 0)

and for t > 0 every head is re-trained on Gaussian samples of every seen class with
the local alignment loss (:mod:`cl_bench.strategies.blocks.local_alignment`).

Inference: one backbone pass under the merged A, logits = f [W_0; ..; W_t]^T.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from cl_bench.backbones.base import autocast
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract.loading import method_loader
from cl_bench.contract.memory import FLOAT, Allocation, Workload, adapter_sets, backward_pass
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.strategies.blocks.adapter_template import AdapterModel, AdapterStrategy, Normalize
from cl_bench.strategies.blocks.gaussian_alignment import class_gaussians
from cl_bench.strategies.blocks.local_alignment import align_locally
from cl_bench.strategies.blocks.ties import ties_merge


class LcaNet(AdapterModel):
    """The trained and merged adapter set (``sets[0]``), the set the task vectors are
    taken from (``base``), the per-task heads and the class statistics."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        d = vit.dim
        self.base = copy.deepcopy(self.sets[0]).requires_grad_(False)
        self.head = nn.ParameterList()  # W_k, one (classes of task k, d) block per task
        self.register_buffer("means", torch.zeros(0, d))
        full = params["ca_storage"] == "covariance"
        self.register_buffer("covs", torch.zeros((0, d, d) if full else (0, d)))
        self.merged: list[torch.Tensor] = []  # A as task t began (the merge of 0..t-1)

    def begin_task(self, task: int, classes: list[int]) -> None:
        """Freeze the earlier heads, add the task's head (trunc normal, std 0.02, as the
        official ContinualLinear), and keep A as it is for the merge after the task."""
        super().begin_task(task, classes)
        if len(self.head) <= task:
            self.head.requires_grad_(False)
            block = torch.empty(len(classes), self.vit.dim, device=self.means.device)
            self.head.append(nn.Parameter(nn.init.trunc_normal_(block, std=0.02)))
        self.merged = [p.detach().clone() for p in self.sets[0].parameters()]

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        super().prepare_restore(state)
        while len(self.head) < len({n.split(".")[1] for n in state if n.startswith("head.")}):
            self.head.append(nn.Parameter(torch.empty(0), requires_grad=False))
        for name in ("means", "covs"):
            setattr(self, name, torch.empty_like(state[name]))

    def logits(self, f: torch.Tensor) -> torch.Tensor:
        """f [W_0; ..; W_t]^T over every seen class, in classifier order."""
        return f.float() @ torch.cat(list(self.head)).T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] -> logits over all classes (-inf where not allowed): in
        training the newest head over the current task's classes, else every head."""
        f = self.cls(self.normalize(x), self.sets[0])
        if self.training:
            return self.spread(f.float() @ self.head[-1].T, self.cached("current", x.device))
        return self.spread(self.logits(f), self.cached("order", x.device))

    @torch.no_grad()
    def merge(self) -> None:
        """A <- TIES merge of the previous merge and the just-trained A (task > 0)."""
        p, previous, self.merged = self.params, self.merged, []
        if self.task == 0:
            return
        for param, base, before in zip(
            self.sets[0].parameters(), self.base.parameters(), previous, strict=True
        ):
            param.copy_(ties_merge(base, [before, param], p["topk"], p["merge_coef"]))

    @torch.no_grad()
    def set_statistics(self, dataset, device: torch.device, precision: str) -> None:
        """Mean and covariance (+ 1e-4 I) of f under the just-trained A, per current
        class (rows: class ids)."""
        feats, labels = [], []
        for x, y, *_ in method_loader(dataset, self.params["eval_batch_size"]):
            with autocast(device, precision):
                feats.append(self.cls(self.normalize(x.to(device)), self.sets[0]).float())
            labels.append(y.to(device))
        self.means, self.covs = class_gaussians(
            torch.cat(feats),
            torch.cat(labels),
            self.current.tolist(),
            self.means,
            self.covs,
            len(self.task_of_class),
        )


def align_classifier(model: LcaNet, params: dict) -> None:
    """Local classifier alignment of every head (official ``align``: SGD, momentum 0.9,
    weight decay ``ca_weight_decay``, cosine over ``ca_epochs`` to 0; ``ca_samples``
    features per seen class drawn once, batches of ``ca_batch_size``)."""
    order = model.order.to(model.means.device)
    model.head.requires_grad_(True)
    opt, sched = make_optimizer(
        dict(
            params,
            lr=params["ca_lr"],
            weight_decay=params["ca_weight_decay"],
            optimizer="sgd",
            momentum=0.9,
            scheduler="cosine",
            epochs=params["ca_epochs"],
            eta_min=0.0,
        ),
        model.head.parameters(),
    )
    align_locally(
        model.means[order],
        model.covs[order],
        params["ca_samples"],
        params["ca_epochs"],
        params["ca_batch_size"],
        params["robust_weight"],
        opt,
        sched,
        model.logits,
    )
    model.head.requires_grad_(False)


class Lca(AdapterStrategy):
    """LCA as an Avalanche strategy on images."""

    model_class = LcaNet

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """Two adapter sets (the merged one and its base) and the copy of the merged one
        kept while a task trains, a d x d covariance per class (``ca_storage:
        covariance``), the alignment's samples, and what the backward pass keeps
        (adapters beside every block's MLP)."""
        d, n = work.dim, work.n_classes
        per_class = d * d if params["ca_storage"] == "covariance" else d
        drawn = params["ca_samples"] * n * d * FLOAT
        return [
            adapter_sets(work, params["ffn"], 3, "ffn"),
            Allocation("the class statistics", n * (per_class + d) * FLOAT, "ca_storage"),
            Allocation("the classifier alignment's samples", drawn, "ca_samples"),
            backward_pass(work, params, 1),
        ]

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """After the first task (no merge, no alignment), every task adds a head over its
        classes and their statistics; the two adapter sets stay (account)."""
        return 1

    def build_optimizer(self, model: LcaNet):
        """The adapter set and the newest head, one SGD (official ``train``)."""
        return make_optimizer(
            self.params, [*model.sets.parameters(), *model.head[-1:].parameters()]
        )

    def _after_training_exp(self, **kwargs) -> None:
        self.model.eval()
        self.model.set_statistics(self.experience.dataset.eval(), self.device, self.precision)
        self.model.merge()
        if self.model.task > 0:
            align_classifier(self.model, self.params)
        super()._after_training_exp(**kwargs)
