"""SLDC: Rao, Xu, Li, Zhao, Liu, Ha, Alippi, "Compensating Distribution Drifts in
Class-incremental Learning of Pre-trained Vision Transformers" (AAAI 2026, arXiv
2511.09926). Read from the authors' code (raoxuan98-hash/sldc_rebuttal at fe0f492:
``models/sldc.py``, ``models/sldc_modules.py``, ``convs/vits.py``, ``main_sldc.py``);
departures in methods/sldc.yaml.

Sequential fine-tuning of one LoRA set (every block's qkv, fc1 and fc2, rank 4,
:mod:`cl_bench.backbones.lora`) and a linear head, one block of rows W_k per task with
a per-class scale s (no bias). f(x) is the [CLS] after the final norm (``final_norm:
plain``: a layer norm without affine weights, as the authors' ViT replaces the
pretrained one). Training loss on a batch of task t, with the logits z = s * (W f)
over task t's classes only and f' the feature under the LoRA set as it was before
task t (no gradient; the ``beta`` variants, ``gamma_kd`` > 0, task t > 0):

    SCE(z, y) + gamma_kd mean((f' - f)^2) + gamma_norm (||f'|| - ||f||)^2 (mean over the batch)
    SCE(z, y) = a CE(p, q) + b CE(q, p),   p = clamp(softmax z, 1e-7, 1),
                                           q = clamp(onehot y, 1e-4, 1)

After task t, with X and Y the L2-normalised features of the task's training images
before and after the task (rows), n of them, d wide (``compensation: linear``, t > 0):

    W = (X^T X + gamma_1 I)^-1 X^T Y,   w = exp(-n / (alpha_t d)),   A = (1 - w) W + w I
    every stored class:  mu <- A^T mu,   Sigma <- A^T Sigma A + 1e-2 I

(the authors multiply row vectors: mu^T A), then the mean and covariance of f of
task t's classes are stored. A unified classifier, a copy of the training head, is
trained on ``ca_samples`` samples per seen class of N(mu, Sigma + 1e-3 I) for
``ca_epochs`` epochs (Adam, cosine to ca_lr / 10, batches of 32 C / 10 for C seen
classes, SCE), and classifies the test images: one backbone pass per image.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from cl_bench.backbones.base import Backbone, autocast
from cl_bench.backbones.lora import LoraSet, lora_applied
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract.loading import method_loader
from cl_bench.contract.memory import FLOAT, Allocation, Workload, backward_pass
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.errors import UserError
from cl_bench.strategies.blocks.adapter_template import AdapterModel, AdapterStrategy, Normalize
from cl_bench.strategies.blocks.gaussian_alignment import (
    class_gaussians,
    gaussian_factor,
    sample_features,
)

PROB_FLOOR, LABEL_FLOOR = 1e-7, 1e-4  # the clamps of the authors' symmetric_cross_entropy_loss
TRANSPORT_JITTER = 1e-2  # added to every transported covariance
SAMPLING_JITTER = 1e-3  # added to a covariance before its Cholesky factor (GaussianStatistics)
EMPTY: list[int] = []


def symmetric_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, a: float = 0.5, b: float = 0.5
) -> torch.Tensor:
    """a CE(p, q) + b CE(q, p) with p = clamp(softmax(logits), 1e-7, 1) and
    q = clamp(onehot(targets), 1e-4, 1), each averaged over the batch."""
    p = logits.float().softmax(1).clamp(PROB_FLOOR, 1.0)
    q = F.one_hot(targets, logits.shape[1]).float().clamp(LABEL_FLOOR, 1.0)
    ce = -(q * p.log()).sum(1).mean()
    rce = -(p * q.log()).sum(1).mean()
    return a * ce + b * rce


def distillation(
    before: torch.Tensor, after: torch.Tensor, gamma_kd: float, gamma_norm: float
) -> torch.Tensor:
    """gamma_kd mean((before - after)^2) + gamma_norm mean((||before|| - ||after||)^2)."""
    feature = (before - after).pow(2).mean()
    norms = F.mse_loss(after.norm(dim=1), before.norm(dim=1))
    return gamma_kd * feature + gamma_norm * norms


def drift_operator(
    before: torch.Tensor, after: torch.Tensor, ridge: float, alpha_t: float
) -> torch.Tensor:
    """A (d x d) with normalised after ~ normalised before @ A (module docstring), the
    ridge solve in float64."""
    x = F.normalize(before.double(), dim=1)
    y = F.normalize(after.double(), dim=1)
    n, d = x.shape
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    w = torch.linalg.solve(x.T @ x + ridge * eye, x.T @ y)
    weight = math.exp(-n / (alpha_t * d))
    return ((1 - weight) * w + weight * eye).float()


def transport(
    means: torch.Tensor, covs: torch.Tensor, a: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row means (C, d) and covariances (C, d, d) through A: mu^T A and
    A^T Sigma A + 1e-2 I."""
    eye = torch.eye(a.shape[0], dtype=covs.dtype, device=covs.device)
    return means @ a, a.T @ covs @ a + TRANSPORT_JITTER * eye


def unified_batch(n_classes: int) -> int:
    """The authors' batch size of the classifier refinement: 32 C // 10 (at least 1)."""
    return max(1, 32 * n_classes // 10)


class SldcNet(AdapterModel):
    """The LoRA set (``sets[0]``), the training head, the unified classifier and the
    class statistics."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        d = vit.dim
        self.head = nn.ParameterList()  # W_k: (classes of task k, d), one block per task
        self.head_scale = nn.ParameterList()  # s_k: one per class of task k
        self.unified_weight = nn.Parameter(torch.zeros(0, d))  # rows in classifier order
        self.unified_scale = nn.Parameter(torch.zeros(0))
        self.register_buffer("means", torch.zeros(0, d))
        self.register_buffer("covs", torch.zeros(0, d, d))
        # the LoRA set as it was before the current task: not stored, rebuilt per task
        self.__dict__["previous"] = None
        self.previous_task = -1
        self.features: torch.Tensor | None = None  # the last training batch's f
        self.previous_features: torch.Tensor | None = None  # and its f'

    def new_set(self) -> LoraSet:
        p = self.params
        return LoraSet(self.vit.vit, range(self.vit.depth), p["lora_rank"], p["lora_scale"])

    def begin_task(self, task: int, classes: list[int]) -> None:
        """A head block for the task's classes (nn.Linear's init, scales 1) and a frozen
        copy of the LoRA set as it stands (the previous model)."""
        super().begin_task(task, classes)
        device = self.means.device
        if len(self.head) <= task:
            block = nn.Linear(self.vit.dim, len(classes), bias=False).weight.data
            self.head.append(nn.Parameter(block.to(device)))
            self.head_scale.append(nn.Parameter(torch.ones(len(classes), device=device)))
        if self.previous_task != task:
            self.__dict__["previous"] = copy.deepcopy(self.sets[0]).requires_grad_(False)
            self.previous_task = task

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        super().prepare_restore(state)
        for name in ("head", "head_scale"):
            blocks = getattr(self, name)
            while len(blocks) < len({n.split(".")[1] for n in state if n.startswith(name + ".")}):
                blocks.append(nn.Parameter(torch.empty(0)))
        for name in ("means", "covs"):
            setattr(self, name, torch.empty_like(state[name]))

    def feature(self, x: torch.Tensor, lora: LoraSet | None) -> torch.Tensor:
        """f of normalised images under ``lora`` (None: the pretrained ViT)."""
        norm = self.vit.vit.norm
        plain = self.params["final_norm"] == "plain"
        with lora_applied(self.vit.vit, lora):
            if plain:
                norm.forward = lambda t: F.layer_norm(t, norm.normalized_shape, eps=norm.eps)
            try:
                return self.vit(x).cls
            finally:
                if plain:
                    del norm.forward

    def head_logits(self, f: torch.Tensor) -> torch.Tensor:
        """s * (W f) over every seen class, in classifier order."""
        return F.linear(f, torch.cat(list(self.head))) * torch.cat(list(self.head_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] -> logits over all classes (-inf for classes not seen): the
        training head in training (f' computed too where the loss distils), the unified
        classifier otherwise."""
        x = self.normalize(x)
        order = self.cached("order", x.device)
        f = self.feature(x, self.sets[0])
        if not self.training:
            return self.spread(F.linear(f, self.unified_weight) * self.unified_scale, order)
        self.features = f.float()
        self.previous_features = None
        if self.task > 0 and self.params["gamma_kd"] > 0:
            with torch.no_grad():
                self.previous_features = self.feature(x, self.previous).float()
        return self.spread(self.head_logits(f), order)

    @torch.no_grad()
    def task_features(
        self, dataset, device: torch.device, precision: str
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """f' (before the task) and f (after it) of every image of ``dataset``, and
        their labels."""
        before, after, labels = [], [], []
        for x, y, *_ in method_loader(dataset, self.params["eval_batch_size"]):
            with autocast(device, precision):
                x = self.normalize(x.to(device))
                after.append(self.feature(x, self.sets[0]).float())
                before.append(self.feature(x, self.previous).float())
            labels.append(y.to(device))
        return torch.cat(before), torch.cat(after), torch.cat(labels)

    @torch.no_grad()
    def update_statistics(
        self, before: torch.Tensor, after: torch.Tensor, labels: torch.Tensor
    ) -> None:
        """Compensate the stored classes' statistics for the task's drift
        (``compensation: linear``), then add the task's classes' own."""
        p = self.params
        stored = (self.task_of_class[: len(self.means)] >= 0).nonzero().squeeze(1)
        if self.task > 0 and p["compensation"] == "linear" and len(stored):
            a = drift_operator(before, after, p["gamma_1"], p["alpha_t"])
            index = stored.to(self.means.device)
            self.means[index], self.covs[index] = transport(self.means[index], self.covs[index], a)
        self.means, self.covs = class_gaussians(
            after,
            labels,
            self.current.tolist(),
            self.means,
            self.covs,
            len(self.task_of_class),
            jitter=0.0,
        )

    def refine(self) -> None:
        """Train the unified classifier, from a copy of the training head, on Gaussian
        samples of every seen class (module docstring)."""
        p = self.params
        order = self.order.to(self.means.device)
        weight = torch.cat(list(self.head)).detach().clone()
        scale = torch.cat(list(self.head_scale)).detach().clone()
        self.unified_weight.data, self.unified_scale.data = weight, scale
        eye = torch.eye(self.vit.dim, device=self.means.device)
        factors = gaussian_factor(self.covs[order] + SAMPLING_JITTER * eye)
        x, y = sample_features(self.means[order], factors, p["ca_samples"])
        opt, sched = make_optimizer(
            dict(
                p,
                optimizer="adam",
                lr=p["ca_lr"],
                weight_decay=p["ca_weight_decay"],
                scheduler="cosine",
                epochs=p["ca_epochs"],
                eta_min=p["ca_lr"] / 10,
            ),
            [self.unified_weight, self.unified_scale],
        )
        batch = unified_batch(len(order))
        with torch.enable_grad():
            for _ in range(p["ca_epochs"]):
                shuffle = torch.randperm(len(x), device=x.device)
                x, y = x[shuffle], y[shuffle]
                for start in range(0, len(x), batch):
                    xb, yb = x[start : start + batch], y[start : start + batch]
                    logits = F.linear(xb, self.unified_weight) * self.unified_scale
                    loss = symmetric_cross_entropy(logits, yb)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                sched.step()


class Sldc(AdapterStrategy):
    """SLDC as an Avalanche strategy on images."""

    model_class = SldcNet
    injects = "puts LoRA updates into the attention and MLP layers of transformer blocks"

    @classmethod
    def check_params(cls, params: dict, backbone: Backbone) -> None:
        super().check_params(params, backbone)
        if params["checkpoint_blocks"]:
            raise UserError(
                f"SLDC: checkpoint_blocks = {params['checkpoint_blocks']}, but its LoRA "
                "updates are hooked for one call and would be missing when a checkpointed "
                "block is recomputed; use 0 (--set sldc.checkpoint_blocks=0)."
            )
        hidden = backbone.model.blocks[0].mlp.fc1.out_features
        if params["lora_rank"] > min(backbone.dim, hidden):
            raise UserError(
                f"SLDC: lora_rank = {params['lora_rank']} exceeds the width of "
                f"{backbone.name}'s layers ({backbone.dim}); lower it (--set sldc.lora_rank=4)."
            )

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """After the first task (no distillation, no drift to compensate), every task
        distils from the previous model, moves every stored class Gaussian and adds its
        own classes' statistics and head rows (account)."""
        return min(n_tasks, 1)

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """Two LoRA sets (the trained one and the previous task's copy), a d x d
        covariance per class, the refinement's samples, and the backward pass through
        every block (the LoRA weights sit in block 0)."""
        d, n, r = work.dim, work.n_classes, params["lora_rank"]
        per_set = work.blocks * r * (d + 3 * d + 2 * (d + 4 * d)) * FLOAT
        drawn = params["ca_samples"] * n * d * FLOAT
        return [
            Allocation("2 LoRA sets", 2 * per_set, "lora_rank"),
            Allocation("the class statistics", n * d * d * FLOAT, "compensation"),
            Allocation("the refinement's samples", drawn, "ca_samples"),
            backward_pass(work, params, 0, trains_blocks=True),
        ]

    def build_optimizer(self, model: SldcNet):
        """The LoRA set at ``lr``, the head blocks and scales at ``lr x head_lr_ratio``,
        cosine to lr / 3 (authors' system_training)."""
        p = self.params
        head = [*model.head.parameters(), *model.head_scale.parameters()]
        return make_optimizer(
            dict(p, scheduler="cosine", eta_min=p["lr"] / 3),
            [
                {"params": list(model.sets.parameters())},
                {"params": head, "lr": p["lr"] * p["head_lr_ratio"]},
            ],
        )

    def model_adaptation(self, model=None):
        model = super().model_adaptation(model)
        if model.previous is not None:
            model.previous.to(self.device)
        return model

    def criterion(self) -> torch.Tensor:
        out, y = self.mb_output, self.mb_y
        if not self.is_training:
            return self._criterion(out, y)
        model, p = self.model, self.params
        current = model.cached("current", out.device)
        loss = symmetric_cross_entropy(
            out[:, current], torch.searchsorted(current, y), p["sce_a"], p["sce_b"]
        )
        if model.previous_features is not None:
            loss = loss + distillation(
                model.previous_features, model.features, p["gamma_kd"], p["gamma_norm"]
            )
        return loss

    def _after_training_exp(self, **kwargs) -> None:
        model = self.model
        model.eval()
        before, after, labels = model.task_features(
            self.experience.dataset.eval(), self.device, self.precision
        )
        model.update_statistics(before, after, labels)
        model.refine()
        model.__dict__["previous"] = None
        super()._after_training_exp(**kwargs)
