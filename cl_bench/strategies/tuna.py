"""TUNA: Wang, Zhou, Ye, "Integrating Task-Specific and Universal Adapters for
Pre-Trained Model-based Class-Incremental Learning" (ICCV 2025, arXiv 2508.08165).
Read from the authors' code (github.com/Ngahoang2005/ICCV2025-TUNA at its root commit
8e1c3ec: ``models/tuna.py``, ``backbone/vit_tuna.py``, ``exps/*.json``); departures
and the switches that reproduce the authors' code in methods/tuna.yaml.

One adapter set A (AdaptFormer on every block's MLP, width ``ffn``,
:mod:`cl_bench.backbones.adapters`) is trained through all tasks; after task t its
state is kept as the task-specific set A_t and task t + 1 goes on from a copy. The
classifier is cosine, one block of rows W_k per task (no bias, no learnt scale).

Training loss on a batch of task t, with f = final-norm [CLS] under A_t, s = ``scale``
and m = ``margin``, over the columns of task t's classes only (CosFace):

    CE(s (cos(f, W_t) - m onehot(y)))
      + reg e^{-(t+1)} sum_{k<t} (1/L) sum_l |mean(n(U_t^l) n(U_k^l)^T)|   (``orth``)

U^l the up-projection weight (D x r) of block l, n() the row-wise L2 normalisation.

Universal adapter (EMR-Merging's elected vector, Huang et al., NeurIPS 2024): for
every parameter p over the task sets A_0..A_t,

    sign = +1 where mean_k p_k > 0, else -1
    U    = sign * max_k { |p_k| : sign p_k > 0 }        (0 where no p_k agrees)

After task t: the mean and covariance (+ 1e-4 I) of f under A_t per class of task t;
for t > 0 the classifier is aligned on Gaussian samples of every seen class (mean
scaled by 0.9 + 0.1 (k+1)/(t+1) for a class of task k with ``decay``), as MOS does
(:mod:`cl_bench.strategies.blocks.gaussian_alignment`).

Inference, with p_k = softmax(s cos(f_k(x), W)) over the seen classes:

    k* = argmin_k H(p_k),  H(p) = -sum_c p_c log(p_c + 1e-10)      (per image)
    output = p_{k*} + softmax(s cos(f_U(x), W))

t + 2 backbone passes per test image after t + 1 tasks (one per task set and one under
U); one pass when U equals the only task set (after the first task, the merge of one
set is that set), and t + 1 with ``universal: last``.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from cl_bench.backbones.adapters import AdapterSet
from cl_bench.backbones.base import autocast
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract.loading import method_loader
from cl_bench.contract.memory import FLOAT, Allocation, Workload, adapter_sets, backward_pass
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.strategies.blocks.adapter_template import AdapterModel, AdapterStrategy, Normalize
from cl_bench.strategies.blocks.cosine_alignment import align_classifier, combine
from cl_bench.strategies.blocks.gaussian_alignment import class_gaussians


@torch.no_grad()
def elect(sets: list[AdapterSet]) -> AdapterSet:
    """The universal set (module docstring): per entry, the largest magnitude among the
    sets that agree with the sign of their mean, with that sign."""
    first = sets[0]
    out = AdapterSet(first.dim, first.ffn, first.blocks, first.scale, first.dropout)
    out.to(next(first.parameters()).device).requires_grad_(False)
    sources = [dict(s.named_parameters()) for s in sets]
    for name, param in out.named_parameters():
        stacked = torch.stack([src[name] for src in sources])
        sign = torch.where(stacked.mean(0) > 0, 1.0, -1.0).to(stacked)
        agree = stacked * sign > 0
        param.copy_((stacked.abs() * agree).amax(0) * sign)
    return out


def orthogonality(current: AdapterSet, earlier: list[AdapterSet]) -> torch.Tensor:
    """sum_k (1/L) sum_l |mean(n(U_cur^l) n(U_k^l)^T)| over the earlier sets k and the
    L blocks (n: row-wise L2 normalisation of the up-projection weights)."""
    total = current[current.blocks[0]].up.weight.new_zeros(())
    for old in earlier:
        for block in current.blocks:
            cur = F.normalize(current[block].up.weight, dim=1)
            prev = F.normalize(old[block].up.weight, dim=1)
            total = total + (cur @ prev.T).mean().abs() / len(current.blocks)
    return total


class TunaNet(AdapterModel):
    """The task sets (the last one trained), the universal set, the per-task cosine
    classifier blocks and the class statistics."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        d = vit.dim
        self.head = nn.ParameterList()  # W_k, one (classes of task k, d) block per task
        self.universal: AdapterSet | None = None
        self.register_buffer("means", torch.zeros(0, d))
        full = params["ca_storage"] == "covariance"
        self.register_buffer("covs", torch.zeros((0, d, d) if full else (0, d)))
        self.route: torch.Tensor | None = None  # the chosen task set per image

    def new_set(self) -> AdapterSet:
        return AdapterSet(
            self.vit.dim, self.params["ffn"], range(self.vit.depth), dropout=self.params["dropout"]
        )

    def begin_task(self, task: int, classes: list[int]) -> None:
        """Freeze the earlier sets, go on training a copy of the last one, add the task's
        classifier block (trunc normal, std 0.02, as the official head)."""
        super().begin_task(task, classes)
        if len(self.sets) <= task:
            self.sets.requires_grad_(False)
            if self.params["orth"] and self.params["orth_old_grad"]:
                for old in self.sets:
                    for block in old.blocks:
                        old[block].up.weight.requires_grad_(True)
            self.sets.append(copy.deepcopy(self.sets[-1]).requires_grad_(True))
        if len(self.head) <= task:
            block = torch.empty(len(classes), self.vit.dim, device=self.means.device)
            self.head.append(nn.Parameter(nn.init.trunc_normal_(block, std=0.02)))

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        super().prepare_restore(state)
        while len(self.head) < len({n.split(".")[1] for n in state if n.startswith("head.")}):
            self.head.append(nn.Parameter(torch.empty(0)))
        if any(n.startswith("universal.") for n in state):
            self.universal = self.new_set().requires_grad_(False)
        for name in ("means", "covs"):
            setattr(self, name, torch.empty_like(state[name]))

    def cosine(self, f: torch.Tensor) -> torch.Tensor:
        """cos(f, W) over every seen class, in classifier order."""
        w = torch.cat(list(self.head))
        return F.linear(F.normalize(f.float(), dim=-1), F.normalize(w, dim=-1))

    def merge(self) -> None:
        """Rebuild the universal set from the task sets (``universal: merged``)."""
        if self.params["universal"] == "merged":
            self.universal = elect(list(self.sets))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] -> logits over all classes (-inf where not allowed): in
        training s cos over the current task's classes, else the combined output."""
        x = self.normalize(x)
        s = self.params["scale"]
        if self.training:
            n_cur = len(self.current)
            cos = self.cosine(self.cls(x, self.sets[-1]))  # every block in the graph, as official
            return self.spread(s * cos[:, -n_cur:], self.cached("current", x.device))
        task_logits = torch.stack([s * self.cosine(self.cls(x, a)) for a in self.sets])
        if self.universal is None or len(self.sets) == 1:
            universal = task_logits[-1]
        else:
            universal = s * self.cosine(self.cls(x, self.universal))
        out, self.route = combine(task_logits, universal)
        return self.spread(out, self.cached("order", x.device))

    @torch.no_grad()
    def set_statistics(self, dataset, device: torch.device, precision: str) -> None:
        """Mean and covariance (+ 1e-4 I) of f under the newest set, per current class
        (once per task: :func:`class_gaussians` syncs per class, no training step does)."""
        feats, labels = [], []
        for x, y, *_ in method_loader(dataset, self.params["eval_batch_size"]):
            with autocast(device, precision):
                feats.append(self.cls(self.normalize(x.to(device)), self.sets[-1]).float())
            labels.append(y.to(device))
        self.means, self.covs = class_gaussians(
            torch.cat(feats),
            torch.cat(labels),
            self.current.tolist(),
            self.means,
            self.covs,
            len(self.task_of_class),
        )


class Tuna(AdapterStrategy):
    """TUNA as an Avalanche strategy on images."""

    model_class = TunaNet

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """One adapter set per task and the universal one, a d x d covariance per class
        (``ca_storage: covariance``), the alignment's samples, and what the backward
        pass keeps (adapters beside every block's MLP: every block after the first)."""
        d, n = work.dim, work.n_classes
        per_class = d * d if params["ca_storage"] == "covariance" else d
        drawn = params["batch_size"] * params["ca_samples"] * n * d * FLOAT
        return [
            adapter_sets(work, params["ffn"], work.n_tasks + 1, "ffn"),
            Allocation("the class statistics", n * per_class * FLOAT, "ca_storage"),
            Allocation("the classifier alignment's samples", drawn, "ca_samples"),
            backward_pass(work, params, 1),
        ]

    def build_optimizer(self, model: TunaNet):
        """Every trainable adapter weight and every classifier block, one SGD (official
        get_optimizer: the adapters and the whole fc)."""
        adapters = [p for p in model.sets.parameters() if p.requires_grad]
        return make_optimizer(
            self.params, [{"params": adapters}, {"params": list(model.head.parameters())}]
        )

    def criterion(self) -> torch.Tensor:
        p, out = self.params, self.mb_output
        if self.is_training:
            rows = torch.arange(len(out), device=out.device)
            out = out.clone()
            out[rows, self.mb_y] -= p["scale"] * p["margin"]
        loss = self._criterion(out, self.mb_y)
        task = self.model.task
        if self.is_training and p["orth"] and task > 0:
            # the earlier sets are frozen unless orth_old_grad (then their up-projections
            # learn from this term, as in the official code)
            loss = loss + p["reg"] * math.exp(-(task + 1)) * orthogonality(
                self.model.sets[task], list(self.model.sets[:task])
            )
        return loss

    def routing(self) -> torch.Tensor | None:
        """The lowest-entropy task set per image."""
        return self.model.route

    def _after_training_exp(self, **kwargs) -> None:
        self.model.eval()
        self.model.merge()
        self.model.set_statistics(self.experience.dataset.eval(), self.device, self.precision)
        if self.model.task > 0:
            align_classifier(self.model, self.params)
        super()._after_training_exp(**kwargs)

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """After the first task, whose one set is the universal one, every task adds a
        set and its classes' rows (account)."""
        return 1
