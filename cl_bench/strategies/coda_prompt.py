"""CODA-Prompt: Smith et al., "CODA-Prompt: COntinual Decomposed Attention-based
Prompting for Rehearsal-Free Continual Learning" (CVPR 2023).

Prefix tuning at layers l in {0, ..., 4}; per layer M = 100 components P_m
(L x D, L = 8), keys K_m (D) and attention vectors A_m (D). With the frozen
query q(x) (final [CLS], no prompts):

    alpha_m = cos(q(x) * A_m, K_m)                    (* elementwise)
    p(x)    = sum_m alpha_m P_m                       (L x D)
    prefix  = (p(x)[:L/2] as keys, p(x)[L/2:] as values)
    y_hat   = W h_cls(x; p) + b
    L       = CE(y_hat over the current task's classes)
              + mu sum_l (|K K^T - I|^2 + |A A^T - I|^2 + |P P^T - I|^2)   (means; mu = 0)

Task t of T owns components [t M/T, (t+1) M/T). At its start they are set to
random unit vectors orthogonal to each other and to every earlier component
(Gram-Schmidt, P_m flattened to L D; ``gram_schmidt: official``: the reference's
classical Gram-Schmidt, only nearly orthogonal to trained rows). In training the
earlier components take part but are detached (frozen), later ones are left out;
at test all up to the current task are used. All M components are parameters from the start, as in
the official code: trainable per layer at D = 768 is 100 x (8 + 2) x 768 =
768,000, five layers 3,840,000, + head.

T: ``n_tasks``, or when 0, ceil(n_classes / classes of the first task) (right
for equal-sized tasks, the B0-Inc-k splits of every scenario here).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cl_bench.backbones.base import Backbone
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.errors import UserError
from cl_bench.strategies.blocks.prompt_template import Normalize, PromptModel, PromptStrategy


@torch.no_grad()
def orthonormal_rows(old: torch.Tensor, count: int) -> torch.Tensor:
    """``count`` random unit rows orthogonal to each other and to the rows of ``old``.

    Gram-Schmidt as QR: projecting out an orthonormal basis of span(old) (twice,
    for round-off) makes the new rows orthogonal to trained, no longer mutually
    orthogonal old rows too; the official code projects on those rows one by one.
    """
    new = torch.randn(count, old.shape[1], device=old.device, dtype=old.dtype)
    if old.shape[0]:
        basis = torch.linalg.qr(old.T).Q
        for _ in range(2):
            new -= (new @ basis) @ basis.T
    return torch.linalg.qr(new.T).Q.T


@torch.no_grad()
def official_rows(old: torch.Tensor, count: int) -> torch.Tensor:
    """The reference's rule (``gram_schmidt: official``; LAMDA-PILOT
    ``backbone/prompt.py`` ``CodaPrompt.gram_schmidt`` at commit 2647455): each of
    ``count`` Gaussian draws, drawn as :func:`orthonormal_rows` draws them, minus its
    projection on every earlier row taken one by one (classical Gram-Schmidt): the
    rows of ``old`` as they are, then the new rows before it, not yet normalised;
    then each new row normalised. Once training has moved the old rows off
    orthonormality, the new rows are only nearly orthogonal to them (and to each
    other), which :func:`orthonormal_rows` corrects."""
    new = torch.randn(count, old.shape[1], device=old.device, dtype=old.dtype)
    rows = new - ((new @ old.T) / (old * old).sum(1)) @ old
    for k in range(1, count):
        done = rows[:k].clone()
        rows[k] -= ((new[k] @ done.T) / (done * done).sum(1)) @ done
    return rows / rows.norm(dim=1, keepdim=True)


def attention_weights(q: torch.Tensor, a: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """alpha_bm = cos(q_b * A_m, K_m), (B, M), without forming the (B, M, D) product."""
    k = k / k.norm(dim=1, keepdim=True).clamp_min(1e-12)
    norm = ((q * q) @ (a * a).T).sqrt().clamp_min(1e-12)
    return (q @ (a * k).T) / norm


def ortho_penalty(t: torch.Tensor) -> torch.Tensor:
    """mean((T T^T - I)^2) over the rows of t."""
    return (t @ t.T - torch.eye(t.shape[0], device=t.device, dtype=t.dtype)).pow(2).mean()


class CodaNet(PromptModel):
    """Decomposed prompt components, keys and attention vectors + head."""

    head_init = "torch"  # the official code's nn.Linear head

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        n_layers, pool, length = len(params["layers"]), params["pool_size"], params["length"]
        # zero until their task: each task's slice is set by Gram-Schmidt when it starts
        self.p = nn.Parameter(torch.zeros(n_layers, pool, length, vit.dim))
        self.k = nn.Parameter(torch.zeros(n_layers, pool, vit.dim))
        self.a = nn.Parameter(torch.zeros(n_layers, pool, vit.dim))
        self.n_tasks = params["n_tasks"]
        self.span = (0, 0)

    def begin_task(self, task: int, classes: list[int]) -> None:
        super().begin_task(task, classes)
        if not self.n_tasks:
            self.n_tasks = math.ceil(len(self.current) / len(classes))
        per = self.p.shape[1] // self.n_tasks
        if per == 0 or task >= self.n_tasks:
            raise UserError(
                f"coda-prompt: task {task + 1} does not fit {self.n_tasks} tasks of "
                f"{per} components; set coda-prompt.n_tasks to the number of tasks "
                f"(at most pool_size {self.p.shape[1]})."
            )
        s, f = self.span = (task * per, (task + 1) * per)
        rule = official_rows if self.params.get("gram_schmidt") == "official" else orthonormal_rows
        with torch.no_grad():
            for t in (self.p, self.k, self.a):
                for layer in range(t.shape[0]):
                    old = t[layer, :s].flatten(1)
                    t[layer, s:f] = rule(old, f - s).view_as(t[layer, s:f])

    def _active(self, t: torch.Tensor) -> torch.Tensor:
        """Components in use: earlier tasks' (detached in training) and this task's."""
        s, f = self.span
        return torch.cat([t[:, :s].detach(), t[:, s:f]], dim=1) if self.training else t[:, :f]

    def embed(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        p, k, a = self._active(self.p), self._active(self.k), self._active(self.a)
        half, mu = p.shape[2] // 2, self.params["ortho_mu"]
        prefixes, penalty = {}, q.new_zeros(())
        for i, layer in enumerate(self.params["layers"]):
            prompt = torch.einsum("bm,mld->bld", attention_weights(q, a[i], k[i]), p[i])
            prefixes[layer] = (prompt[:, :half], prompt[:, half:])
            if self.training and mu > 0:
                penalty = penalty + mu * (
                    ortho_penalty(k[i]) + ortho_penalty(a[i]) + ortho_penalty(p[i].flatten(1))
                )
        if self.training:
            self.regularizer = penalty
        return self.vit(x, prefixes=prefixes).cls


class CodaPrompt(PromptStrategy):
    """CODA-Prompt as an Avalanche strategy on images."""

    model_class = CodaNet
    state_attrs = (*PromptStrategy.state_attrs, "model.n_tasks", "model.span")

    @classmethod
    def check_params(cls, params: dict, backbone: Backbone) -> None:
        super().check_params(params, backbone)
        length, pool, dim = params["length"], params["pool_size"], backbone.dim
        if length % 2 or pool > dim:
            raise UserError(
                f"coda-prompt needs an even length and pool_size <= the ViT width "
                f"{dim} (orthogonal keys); got length {length}, pool_size {pool}."
            )
        if params["n_tasks"] > pool:
            raise UserError(
                f"coda-prompt: {params['n_tasks']} tasks do not fit pool_size "
                f"{pool} (at least one component per task); raise "
                "coda-prompt.pool_size or use fewer tasks."
            )

    def build_optimizer(self, model: torch.nn.Module):
        """``scheduler: coda_cosine`` is the official per-epoch schedule (see
        :func:`coda_cosine_factor`)."""
        if self.params["scheduler"] != "coda_cosine":
            return super().build_optimizer(model)
        opt, _ = make_optimizer({**self.params, "scheduler": "constant"}, model.parameters())
        epochs = self.params["epochs"]
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda e: coda_cosine_factor(e, epochs))

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """Every task after the first trains its own share of the components (account)."""
        return 1


def coda_cosine_factor(epoch: int, epochs: int) -> float:
    """The learning-rate factor of epoch ``epoch`` (from 0) of ``epochs``:
    cos(99 pi max(e - 1, 0) / (200 (E - 1))).

    The official ``CosineSchedule`` (GT-RIPL/CODA-Prompt ``utils/schedulers.py`` at
    commit 22948d2; LAMDA-PILOT ``models/coda_prompt.py`` at commit 2647455 carries the
    same class) sets epoch 0 in its constructor and then rewinds its counter, so the
    first ``step()`` (official ``learners/default.py``: before epoch 1; PILOT: after
    epoch 0) sets epoch 0 again: the first two epochs train at the full rate and epoch e
    at the factor of e - 1, the last at cos(99 pi (E - 2) / (200 (E - 1))) (E = 20:
    0.097). cl-bench's parity step check found this one-epoch shift (cl-bench had used
    the factor of e)."""
    return math.cos(99 * math.pi * max(epoch - 1, 0) / (200 * max(epochs - 1, 1)))
