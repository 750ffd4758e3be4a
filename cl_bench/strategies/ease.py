"""EASE: Zhou, Sun, Ye, Zhan, "Expandable Subspace Ensemble for Pre-Trained
Model-Based Class-Incremental Learning" (CVPR 2024). Read from the official code
(sun-hailong/CVPR24-Ease ``models/ease.py``, ``backbone/vit_ease.py``,
``backbone/linears.py``; the same files in LAMDA-PILOT); departures in
methods/ease.yaml.

Task t trains a fresh adapter set A_t (AdaptFormer on every block's MLP,
:mod:`cl_bench.backbones.adapters`) with a task-local cosine classifier (the
"proxy", sigma learned) on the final [CLS] f_t(x) of the ViT with A_t; then A_t
is frozen. Subspace k of an image is f_k(x); with ``use_init_ptm`` the frozen
pretrained [CLS] is subspace 0 and the adapters' subspaces are shifted by one.

Prototypes: after task t, every class c of task t gets P[c, k] = mean of f_k(x)
over its training images (eval transform) in every subspace k that exists.
Old classes have no data for the new subspaces; semantic-guided completion
(``recalc_sim: true``, recomputed from the real prototypes after every task)
fills P[c, k] for an old class c of task i and each later adapter subspace k:

    src   = the classes of the tasks >= the task of subspace k (real in k and in own(i))
    S     = softmax_j cos(P[c, own(i)], P[src_j, own(i)])      (no temperature)
    P[c, k] = sum_j S_j P[src_j, k]

Inference (``forward_reweight``): every subspace's feature (one backbone pass
per adapter set, plus the pretrained pass with ``use_init_ptm``), and for a
class c of task i

    logit_c = sum_k w_ik cos(f_k(x), P[c, k]),
    w_ik = 1 for k = own(i), beta for the pretrained subspace, alpha / t otherwise

with t the index of the newest task (the official ``cur_task``). The classifier's
sigma is 1 at test (the official fc is never trained), so it is left out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cl_bench.backbones.base import autocast
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract import Allocation, Workload, class_means
from cl_bench.contract.memory import FLOAT
from cl_bench.strategies.blocks.adapter_template import AdapterModel, AdapterStrategy, Normalize
from cl_bench.strategies.blocks.heads import CosineClassifier


def complete_prototypes(
    protos: torch.Tensor, task_of_class: torch.Tensor, offset: int
) -> torch.Tensor:
    """Semantic-guided completion (module docstring) of ``protos`` (C, S, d): rows
    of classes of task i (``task_of_class``, -1 for unseen rows) in the adapter
    subspaces of later tasks, from the real prototypes. ``offset``: 1 when
    subspace 0 is the pretrained model's, else 0."""
    out = protos.clone()
    n_tasks = int(task_of_class.max()) + 1 if task_of_class.numel() else 0
    for i in range(n_tasks - 1):
        old, own = task_of_class == i, i + offset
        anchors = F.normalize(protos[old, own], dim=-1)
        for k in range(own + 1, n_tasks + offset):
            src = task_of_class >= k - offset
            sim = (anchors @ F.normalize(protos[src, own], dim=-1).T).softmax(dim=1)
            out[old, k] = sim @ protos[src, k]
    return out


def subspace_weights(
    task_of_class: torch.Tensor, n_subspaces: int, alpha: float, beta: float, offset: int
) -> torch.Tensor:
    """(C, S): w_ik of the module docstring for every class row (zero for unseen rows)."""
    newest = int(task_of_class.max()) if task_of_class.numel() else 0
    other = alpha / newest if newest > 0 else 0.0
    w = torch.full((len(task_of_class), n_subspaces), other)
    if offset:
        w[:, 0] = beta
    rows = (task_of_class >= 0).nonzero().squeeze(1)
    w[rows, task_of_class[rows] + offset] = 1.0
    w[task_of_class < 0] = 0.0
    return w


class EaseNet(AdapterModel):
    """Adapter sets, the completed prototypes (``protos``, C x S x d) and, while a
    task trains, its proxy classifier."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        self.offset = int(params["use_init_ptm"])
        self.register_buffer("protos", torch.zeros(0, self.offset, vit.dim))
        self.proxy: CosineClassifier | None = None

    @property
    def n_subspaces(self) -> int:
        return self.offset + len(self.sets)

    def begin_task(self, task: int, classes: list[int]) -> None:
        """Freeze the old sets, add a fresh one and a fresh proxy over ``classes``."""
        super().begin_task(task, classes)
        if len(self.sets) <= task:
            self.sets.requires_grad_(False)
            self.sets.append(self.new_set().to(self.protos.device))
        self.proxy = CosineClassifier(self.vit.dim)
        self.proxy.grow(len(classes))

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        super().prepare_restore(state)
        self.protos = torch.empty_like(state["protos"])

    def end_task(self) -> None:
        """After a task's prototypes are set: the proxy is not kept."""
        self.proxy = None

    def subspaces(self, x: torch.Tensor) -> torch.Tensor:
        """(B, S, d): the [CLS] of normalised images in every subspace, one backbone
        pass per adapter set (and one without adapters with ``use_init_ptm``)."""
        feats = [self.vit.query(x)] if self.offset else []
        feats += [self.cls(x, s) for s in self.sets]
        return torch.stack(feats, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] -> logits over all classes (-inf where not allowed)."""
        x = self.normalize(x)
        if self.training:
            return self.spread(
                self.proxy(self.cls(x, self.sets[-1])), self.cached("current", x.device)
            )
        p = self.params
        cos = torch.einsum(
            "bsd,csd->bcs",
            F.normalize(self.subspaces(x).float(), dim=-1),
            F.normalize(self.protos, dim=-1),
        )
        w = self.cached(
            "weights",
            x.device,
            lambda: subspace_weights(
                self.task_of_class, self.n_subspaces, p["alpha"], p["beta"], self.offset
            ),
        )
        seen = self.cached("seen", x.device)
        return self.spread((cos * w).sum(-1)[:, seen], seen)

    @torch.no_grad()
    def set_prototypes(self, dataset, device: torch.device, precision: str) -> None:
        """Class means of the current task's classes in every subspace, then the
        completion of the old classes in the new subspace(s)."""

        def embed(x: torch.Tensor) -> torch.Tensor:
            with autocast(device, precision):
                return self.subspaces(self.normalize(x)).flatten(1).float()

        classes, means = class_means(dataset, embed, device, self.params["eval_batch_size"])
        protos = torch.zeros(
            len(self.task_of_class), self.n_subspaces, self.vit.dim, device=self.protos.device
        )
        protos[: self.protos.shape[0], : self.protos.shape[1]] = self.protos
        protos[classes.to(protos.device)] = means.view(len(classes), self.n_subspaces, -1)
        self.protos = complete_prototypes(protos, self.task_of_class.to(protos.device), self.offset)


class Ease(AdapterStrategy):
    """EASE as an Avalanche strategy on images."""

    model_class = EaseNet

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """Beside the adapter sets: a prototype of every class in every subspace (C x S x d,
        S = the tasks, plus one with ``use_init_ptm``), which the test-time cosine reads
        whole."""
        subspaces = work.n_tasks + int(params["use_init_ptm"])
        return [
            *super().memory(params, work),
            Allocation(
                f"the prototypes of every class in {subspaces} subspaces",
                work.n_classes * subspaces * work.dim * FLOAT,
                "use_init_ptm",
            ),
        ]

    def _after_training_exp(self, **kwargs) -> None:
        self.model.eval()
        self.model.set_prototypes(self.experience.dataset.eval(), self.device, self.precision)
        self.model.end_task()
        super()._after_training_exp(**kwargs)

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """Every task adds an adapter set, and a prototype of every class in the new
        subspace (account)."""
        return 1
