"""A bi-level routing mixture of adapter experts on every block of a frozen ViT: CaRE's
BR-MoE (Lou, Fu, Yu, ICML 2026, arXiv 2602.03473), read from the authors' code
(LMMMEng/CaRE at d90800a, ``backbone/vit_brmoe.py``: ``Adapter``, ``MoEAdapter``;
``utils/inc_net.py``: ``ffn_option="parallel"``).

Each adapted block i reads h, the input of its ``norm2`` (the same hook as
:mod:`cl_bench.backbones.adapters`), and adds to its output

    delta(h) = sum_{r in R} sum_e g_r,e E_e(h) + S(h)

where every adapter (:class:`NormedAdapter`) is ``scale * up(drop(relu(down(LN(h)))))``
with a learnt per-channel ``scale`` (zeros at init), the experts E_e have width
``expert_ffn`` (one per task), S is the block's shared adapter of width ``shared_ffn``.
Task j adds, per block, an expert E_j, a router rho_j (linear d -> j + 1, one score per
expert that existed then; the later experts' scores are -inf) and a class perceptor
P_j (LayerNorm then linear d -> the classes of task j). Router and perceptor j read
c_j, the [CLS] row of E_j's output.

Routing, with H(z) = -sum softmax(z) log(softmax(z) + 1e-10) the entropy of a
perceptor's output:

* first level, routers: a **forced** pass for task t (training on task t, the class
  statistics, one of the test-time passes) runs the experts 0..t and takes router t
  and the ``routers - 1`` routers j < t with the lowest H(P_j(c_j)), per sample; the
  **routed** pass (task unknown) runs every expert and takes the ``routers`` routers
  with the lowest H(P_j(c_j)) over all tasks; all of them when there are no more;
* second level, experts: each chosen router keeps its ``experts`` highest scores and
  sets the others to -100 (official ``masked_fill``), then g_r = softmax of them;
* the chosen routers' mixtures are summed (not averaged), as official.

With one expert (a forced pass for task 0, or the routed pass after the first task)
the mixture is E_0(h). A forced pass for task t also returns P_t(c_t) of every block
(the perceptor loss).

A new task's expert starts as the mean of the existing experts except the newest
(official ``_init_adapter`` averages ``range(len(adapter) - 1)``); the second task's
expert is drawn fresh. Router weights: truncated normal (std 0.02), zero bias.
Perceptors: their LayerNorm's weight truncated normal (std 0.02, official
``latent_head[-1][0]``), zero bias; the linear layer keeps torch's default init.

Shared adapters under EMA (official ``_get_shared_adapter``): at the start of every
training stage after the first task the shared adapters are copied
(:meth:`RoutedMoE.snapshot_shared`), and before every training forward each
parameter is set to ``decay * snapshot + (1 - decay) * itself``
(:meth:`RoutedMoE.pull_shared`); the snapshot itself never moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from cl_bench.backbones.adapters import Adapter

ENTROPY_EPS = 1e-10  # inside the log of the official entropy
MASKED = -100.0  # the official score of an expert outside a router's top k


class NormedAdapter(Adapter):
    """``scale * up(dropout(relu(down(LN(h)))))`` with a learnt per-channel ``scale``
    (zeros at init, so a fresh adapter adds 0), both projections Kaiming-uniform
    (a = sqrt 5) with zero biases (official ``Adapter``, layer norm "in")."""

    def __init__(self, dim: int, ffn: int, dropout: float) -> None:
        super().__init__(dim, ffn, dropout=dropout)
        nn.init.kaiming_uniform_(self.up.weight, a=math.sqrt(5))
        self.scale = nn.Parameter(torch.zeros(dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return super().forward(self.norm(h))


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """H(softmax(logits)) over the last dimension, with the official 1e-10 in the log."""
    p = logits.softmax(-1)
    return -(p * torch.log(p + ENTROPY_EPS)).sum(-1)


def choose_routers(entropies: torch.Tensor, k: int, forced: int | None) -> torch.Tensor:
    """Router indices (k', B) per sample from the perceptors' entropies (R, B).
    ``forced`` t: router t and the ``k - 1`` lowest-entropy routers among 0..t-1 (all of
    them when there are no more); routed (None): the ``k`` lowest-entropy routers (all
    when there are no more)."""
    if forced is None:
        return entropies.topk(min(k, len(entropies)), dim=0, largest=False).indices
    earlier = entropies[:forced].topk(min(k - 1, forced), dim=0, largest=False).indices
    current = torch.full_like(entropies[0], forced, dtype=torch.long)[None]
    return torch.cat([earlier, current])


def gate(scores: torch.Tensor, experts: int) -> torch.Tensor:
    """Per router (..., E): the ``experts`` highest scores kept, the others set to -100
    (when there are more), then softmax over E."""
    if experts < scores.shape[-1]:
        kept = torch.zeros_like(scores, dtype=torch.bool)
        kept.scatter_(-1, scores.topk(experts, dim=-1).indices, True)
        scores = scores.masked_fill(~kept, MASKED)
    return scores.softmax(-1)


def mix(weights: torch.Tensor, outs: torch.Tensor) -> torch.Tensor:
    """sum_r sum_e weights[r, b, e] outs[e, b]: (R, B, E) weights, (E, B, N, D) outputs."""
    return torch.einsum("rbe,ebnd->bnd", weights.to(outs.dtype), outs)


class MoELayer(nn.Module):
    """One block's experts, routers, perceptors and shared adapter."""

    def __init__(self, dim: int, expert_ffn: int, shared_ffn: int, dropout: float) -> None:
        super().__init__()
        self.dim, self.expert_ffn, self.dropout = dim, expert_ffn, dropout
        self.experts = nn.ModuleList()
        self.routers = nn.ModuleList()
        self.perceptors = nn.ModuleList()
        self.shared = NormedAdapter(dim, shared_ffn, dropout)

    def add_task(self, n_classes: int) -> None:
        """A new expert, router and perceptor, trainable; the earlier ones frozen."""
        self.requires_grad_(False)
        self.shared.requires_grad_(True)
        device = self.shared.scale.device
        expert = NormedAdapter(self.dim, self.expert_ffn, self.dropout).to(device)
        if len(self.experts) > 1:
            with torch.no_grad():
                earlier = [dict(e.named_parameters()) for e in self.experts[:-1]]
                for name, p in expert.named_parameters():
                    p.copy_(torch.stack([e[name] for e in earlier]).mean(0))
        router = nn.Linear(self.dim, len(self.experts) + 1).to(device)
        nn.init.trunc_normal_(router.weight, std=0.02)
        nn.init.zeros_(router.bias)
        perceptor = nn.Sequential(nn.LayerNorm(self.dim), nn.Linear(self.dim, n_classes))
        nn.init.trunc_normal_(perceptor[0].weight, std=0.02)
        nn.init.zeros_(perceptor[0].bias)
        self.experts.append(expert.requires_grad_(True))
        self.routers.append(router.requires_grad_(True))
        self.perceptors.append(perceptor.to(device).requires_grad_(True))

    def forward(
        self,
        h: torch.Tensor,
        task: int | None,
        routers: int,
        experts: int,
        latents: list[torch.Tensor],
    ) -> torch.Tensor:
        """delta(h) (module docstring) of a forced pass for ``task`` or of the routed pass
        (None); a forced pass appends P_task(c_task) to ``latents``."""
        shared = self.shared(h)  # first: the official order of the dropout draws
        n = len(self.experts) if task is None else task + 1
        outs = [self.experts[j](h) for j in range(n)]
        cls = [o[:, 0] for o in outs]
        if n == 1:
            mixed = outs[0]
        else:
            candidates = n if task is None else task
            ent = torch.stack([entropy(self.perceptors[j](cls[j])) for j in range(candidates)])
            scores = torch.stack(
                [F.pad(self.routers[j](cls[j]), (0, n - j - 1), value=-math.inf) for j in range(n)]
            )
            chosen = choose_routers(ent, routers, task)
            picked = scores.gather(0, chosen[..., None].expand(-1, -1, n))
            mixed = mix(gate(picked, experts), torch.stack(outs))
        if task is not None:
            latents.append(self.perceptors[task](cls[task]))
        return mixed + shared


class MoEPass:
    """What :class:`~cl_bench.backbones.prompted.PromptedViT` takes as ``adapters`` for
    one pass: the blocks and, per block, ``h -> delta(h)`` of a forced (``task``) or
    routed (None) pass; ``latents`` collects the forced pass's perceptor outputs, block
    by block."""

    def __init__(self, moe: RoutedMoE, task: int | None) -> None:
        self.moe, self.task = moe, task
        self.latents: list[torch.Tensor] = []

    @property
    def blocks(self) -> tuple[int, ...]:
        return self.moe.blocks

    def __getitem__(self, block: int):
        m = self.moe
        return partial(
            m.layers[str(block)],
            task=self.task,
            routers=m.routers,
            experts=m.experts,
            latents=self.latents,
        )


class RoutedMoE(nn.Module):
    """A :class:`MoELayer` on each of ``blocks``; ``routers`` and ``experts``: how many
    routers a pass takes and how many experts each of them gates."""

    def __init__(
        self,
        dim: int,
        blocks: Sequence[int],
        expert_ffn: int,
        shared_ffn: int,
        dropout: float,
        routers: int,
        experts: int,
    ) -> None:
        super().__init__()
        self.routers, self.experts = routers, experts
        self.layers = nn.ModuleDict(
            {str(b): MoELayer(dim, expert_ffn, shared_ffn, dropout) for b in sorted(blocks)}
        )
        self.snapshot: list[torch.Tensor] = []  # the shared adapters at the stage's start

    @property
    def blocks(self) -> tuple[int, ...]:
        return tuple(int(b) for b in self.layers)

    @property
    def n_tasks(self) -> int:
        return len(next(iter(self.layers.values())).experts)

    def add_task(self, n_classes: int) -> None:
        for layer in self.layers.values():
            layer.add_task(n_classes)

    def forced(self, task: int) -> MoEPass:
        return MoEPass(self, task)

    def routed(self) -> MoEPass:
        return MoEPass(self, None)

    def shared_parameters(self) -> list[nn.Parameter]:
        return [p for layer in self.layers.values() for p in layer.shared.parameters()]

    @torch.no_grad()
    def snapshot_shared(self) -> None:
        self.snapshot = [p.detach().clone() for p in self.shared_parameters()]

    @torch.no_grad()
    def pull_shared(self, decay: float) -> None:
        """Every shared parameter <- decay * its snapshot + (1 - decay) * itself."""
        for param, old in zip(self.shared_parameters(), self.snapshot, strict=True):
            param.copy_(decay * old + (1 - decay) * param)
