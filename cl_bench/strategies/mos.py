"""MOS: Sun, Zhou, Zhao, Gan, Zhan, Ye, "MOS: Model Surgery for Pre-Trained
Model-Based Class-Incremental Learning" (AAAI 2025). Read from the official code
(sun-hailong/AAAI25-MOS ``models/mos.py``, ``backbone/vit_mos.py``; the same files
in LAMDA-PILOT); departures in methods/mos.yaml.

One adapter set (AdaptFormer on every block's MLP, :mod:`cl_bench.backbones.adapters`)
is trained through all tasks together with a linear head W over all classes; after
task t its state is kept as A_t (``sets[t]``) and task t + 1 goes on from a copy.

Adapter merging: after every optimizer step of task t > 0

    A_t <- (1 - m) A_t + m * (1 / t) sum_{k < t} A_k             (m: adapter_momentum)

Training loss on a batch of task t, with f = [CLS] under A_t (final norm, not
normalised) and mu_c the stored class means of the earlier tasks' classes:

    CE(W f restricted to task t's classes) + reg * CE(M M^T / tau, identity),
    M = [mu_1 .. mu_C_old ; f_1 .. f_B]

After task t: per class of task t, the mean and covariance (+ 1e-4 I) of f under A_t
(eval transform); the prototype P_c = mean of f under A_0, the initial guess. For t > 0
the head is then aligned on Gaussian samples of every seen class (classifier
alignment: ``ca_epochs`` epochs, ``batch_size x ca_samples`` samples per class each;
the statistics and the alignment: :mod:`cl_bench.strategies.blocks.gaussian_alignment`).

Inference: one backbone pass per adapter set (T passes after T tasks). The initial
guess is the task of argmax_c cos(f_0(x), P_c); self-refined retrieval then classifies
f_k(x) with W, moves to the task of its prediction and repeats until the task stays
the same (at most ``retrieval_iters`` classifications). With ``ensemble``:

    p(x) = softmax(W f_k(x)) + softmax(T cos(f_0(x), P))
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from cl_bench.backbones.adapters import merge
from cl_bench.backbones.base import autocast
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract.loading import method_loader
from cl_bench.contract.memory import FLOAT, Allocation, Workload
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.strategies.blocks.adapter_template import AdapterModel, AdapterStrategy, Normalize
from cl_bench.strategies.blocks.gaussian_alignment import align_head_with_sgd, class_gaussians


@torch.no_grad()
def merge_step(current: nn.Module, anchor: list[torch.Tensor], momentum: float) -> None:
    """In place: every parameter of ``current`` <- (1 - m) itself + m its ``anchor``
    (the mean of the earlier sets, in ``current.parameters()`` order)."""
    for param, target in zip(current.parameters(), anchor, strict=True):
        param.mul_(1 - momentum).add_(target.to(param.device), alpha=momentum)


def orthogonality_loss(
    features: torch.Tensor, means: torch.Tensor, temperature: float
) -> torch.Tensor:
    """CE(M M^T / temperature, identity) over M = [means; features]: every row apart
    from the old class means and from the batch's other features."""
    m = torch.cat([means.to(features), features])
    return F.cross_entropy(m @ m.T / temperature, torch.arange(len(m), device=m.device))


def self_refine(
    feats: torch.Tensor, start: torch.Tensor, classify, task_of_column: torch.Tensor, max_iter: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-refined adapter retrieval. ``feats`` (B, T, d): the [CLS] under every set;
    ``start`` (B,): the initial guess; ``classify``: (n, d) -> (n, S) logits whose column
    j belongs to task ``task_of_column[j]``. Returns the logits of the last classification
    and the set that produced them, per sample. Evaluation only: its early stop reads
    back whether a sample moved (a sync per refinement), which keeps the classifications
    it runs, and the FLOPs counted for them, those the loop needs."""
    rows = torch.arange(len(feats), device=feats.device)
    k = start.clone()
    logits = classify(feats[rows, k])
    active = torch.ones(len(feats), dtype=torch.bool, device=feats.device)
    for _ in range(max_iter - 1):
        moved = task_of_column[logits.argmax(1)]
        active &= moved != k
        if not active.any():
            break
        k = torch.where(active, moved, k)
        logits = torch.where(active[:, None], classify(feats[rows, k]), logits)
    return logits, k


class MosNet(AdapterModel):
    """The adapter sets (the last one trained), the head, the class statistics and
    the initial-guess prototypes."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        d = vit.dim
        self.head = nn.Linear(d, n_classes)  # timm's fresh head: trunc normal, std 0.02
        nn.init.trunc_normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)
        self.register_buffer("means", torch.zeros(0, d))
        full = params["ca_storage"] == "covariance"
        self.register_buffer("covs", torch.zeros((0, d, d) if full else (0, d)))
        self.register_buffer("protos", torch.zeros(0, d))
        self.anchor: list[torch.Tensor] = []  # mean of the earlier sets, rebuilt per task
        self.features: torch.Tensor | None = None  # the last training batch's [CLS]
        self.route: torch.Tensor | None = None  # the set used per sample of the last batch

    def begin_task(self, task: int, classes: list[int]) -> None:
        """Freeze the earlier sets and go on training a copy of the last one."""
        super().begin_task(task, classes)
        if len(self.sets) <= task:
            self.sets.requires_grad_(False)
            self.sets.append(copy.deepcopy(self.sets[-1]).requires_grad_(True))
        earlier = self.sets[:task]
        self.anchor = (
            [p.detach() for p in merge(earlier, [1 / task] * task).parameters()] if task else []
        )

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        super().prepare_restore(state)
        for name in ("means", "covs", "protos"):
            setattr(self, name, torch.empty_like(state[name]))

    def merge_step(self) -> None:
        if self.anchor and self.params["adapter_momentum"] > 0:
            merge_step(self.sets[-1], self.anchor, self.params["adapter_momentum"])

    def old_means(self) -> torch.Tensor:
        """The stored means of the classes of earlier tasks (read at every training
        step: selected once per task)."""
        return self.cached(
            "old_means",
            self.means.device,
            lambda: self.means[self.task_of_class[: len(self.means)] >= 0],
            self.means,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] -> logits over all classes (-inf where not allowed)."""
        x = self.normalize(x)
        if self.training:
            self.features = self.cls(x, self.sets[-1])
            current = self.cached("current", x.device)
            return self.spread(self.head(self.features)[:, current], current)
        feats = torch.stack([self.cls(x, s) for s in self.sets], dim=1).float()
        seen = self.cached("seen", x.device)
        task_of = self.cached("task_of_seen", x.device, lambda: self.task_of_class[self.seen])
        guess = F.normalize(feats[:, 0], dim=-1) @ F.normalize(self.protos[seen], dim=-1).T
        logits, self.route = self_refine(
            feats,
            task_of[guess.argmax(1)],
            lambda f: self.head(f)[:, seen].float(),
            task_of,
            self.params["retrieval_iters"],
        )
        if self.params["ensemble"]:
            logits = logits.softmax(1) + (len(self.sets) * guess).softmax(1)
        return self.spread(logits, seen)

    @torch.no_grad()
    def set_statistics(self, dataset, device: torch.device, precision: str) -> None:
        """Mean and covariance of the current task's classes under the newest set, and
        their prototypes under set 0 (one pass per image in task 0). Once per task, so
        its selection of each class's rows (a sync per class) is no step's cost."""
        newest, first = self.sets[-1], self.sets[0]
        feats, firsts, labels = [], [], []
        for x, y, *_ in method_loader(dataset, self.params["eval_batch_size"]):
            with autocast(device, precision):
                x = self.normalize(x.to(device))
                f = self.cls(x, newest).float()
                feats.append(f)
                firsts.append(f if newest is first else self.cls(x, first).float())
            labels.append(y.to(device))
        feats, firsts, labels = torch.cat(feats), torch.cat(firsts), torch.cat(labels)
        rows, classes = len(self.task_of_class), self.current.tolist()
        protos = self.protos.new_zeros(rows, self.vit.dim)
        protos[: len(self.protos)] = self.protos
        for c in classes:
            if (labels == c).any():
                protos[c] = firsts[labels == c].mean(0)
        self.means, self.covs = class_gaussians(feats, labels, classes, self.means, self.covs, rows)
        self.protos = protos


def align_classifier(model: MosNet, params: dict) -> None:
    """Classifier alignment: the head alone, trained on Gaussian samples of every seen
    class (SGD, momentum 0.9, cosine over ``ca_epochs``, one step per class-sized chunk)."""
    seen = model.seen.to(model.means.device)
    align_head_with_sgd(
        model.means[seen],
        model.covs[seen],
        params,
        params["ca_epochs"],
        model.head.parameters(),
        lambda x: model.head(x)[:, seen],
    )


class Mos(AdapterStrategy):
    """MOS as an Avalanche strategy on images."""

    model_class = MosNet

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """Beside its adapter sets: a d x d covariance per class (``ca_storage:
        covariance``) and, in classifier alignment, ``batch_size x ca_samples`` drawn
        features per seen class."""
        d, n = work.dim, work.n_classes
        per_class = d * d if params["ca_storage"] == "covariance" else d
        drawn = params["batch_size"] * params["ca_samples"] * n * d * FLOAT
        return [
            *super().memory(params, work),
            Allocation("the class statistics", n * per_class * FLOAT, "ca_storage"),
            Allocation("the classifier alignment's samples", drawn, "ca_samples"),
        ]

    def build_optimizer(self, model: MosNet):
        """Adapters at ``lr``, the head at ``lr x head_lr_ratio`` (official get_optimizer)."""
        p = self.params
        return make_optimizer(
            p,
            [
                {"params": list(model.sets.parameters())},
                {"params": list(model.head.parameters()), "lr": p["lr"] * p["head_lr_ratio"]},
            ],
        )

    def criterion(self) -> torch.Tensor:
        loss = self._criterion(self.mb_output, self.mb_y)
        if self.is_training:
            loss = loss + self.params["reg"] * orthogonality_loss(
                self.model.features.float(), self.model.old_means(), self.params["orth_temperature"]
            )
        return loss

    def _after_update(self, **kwargs) -> None:
        self.model.merge_step()
        super()._after_update(**kwargs)

    def routing(self) -> torch.Tensor | None:
        """The adapter set whose feature gave the final logits, per sample."""
        return self.model.route

    def _after_training_exp(self, **kwargs) -> None:
        self.model.eval()
        self.model.set_statistics(self.experience.dataset.eval(), self.device, self.precision)
        if self.model.task > 0:
            align_classifier(self.model, self.params)
        super()._after_training_exp(**kwargs)

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """Every task after the first adds an adapter set, and its classes' statistics
        and prototypes (account)."""
        return 1
