"""RanPAC: McDonnell, Gong, Parvaneh, Abbasnejad, van den Hengel, "RanPAC: Random
Projections and Pre-trained Models for Continual Learning" (NeurIPS 2023).

Optional first-session adaptation of the backbone (:mod:`first_session`; the paper's
default on a ViT: adapters), then, with f the (adapted) final feature of an image,

    h = ReLU(f W_rand),   W_rand in R^{d x M} fixed, entries N(0, 1),

accumulated per task without keeping any sample,

    G <- G + H_t^T H_t,   C <- C + H_t^T Y_t    (Y_t one-hot over the seen classes),

and the classifier is the ridge solution on everything seen so far,

    W_o = (G + lambda I)^-1 C,   logits = h W_o,

lambda chosen at each task on that task's samples (:mod:`ridge`; ``ridge_search:
float32`` searches with the official float32 arithmetic), split into fit and
validation in an order drawn from the run's seed (:func:`split_order`), among the
candidates at or above the float64 resolution of the accumulated G (below it
G + lambda I is singular to float64: :func:`ridge.resolution`). ``M: 0`` is the
paper's ablation without projection (h = f, no ReLU). Everything after the
backbone runs in float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cl_bench.backbones.base import Backbone
from cl_bench.contract.memory import FLOAT, Allocation, Workload
from cl_bench.strategies.blocks.first_session import FirstSessionNet, FirstSessionTemplate
from cl_bench.strategies.blocks.ridge import choose_ridge, resolution, solve_ridge


def split_order(n: int, seed: int, task: int) -> torch.Tensor:
    """The order in which task ``task``'s ``n`` samples are split for the lambda search.
    The official code splits the features in its shuffled train loader's order, so the
    split changes with the seed; here a permutation drawn from the run's seed (the engine
    seeds torch with it before the run) and the task: seeds sample the split as there,
    and a resumed run draws the same one. (A split fixed per task, the same for every
    seed, made every seed pick the same lambda: bench/parity/results/ranpac.json.)"""
    key = (seed + 1_000_003 * task) % 2**63
    return torch.randperm(n, generator=torch.Generator().manual_seed(key))


class RanpacNet(FirstSessionNet):
    """The fixed projection ``W_rand`` (float32, as drawn), the statistics ``G``
    (M x M) and ``C`` (M x seen classes) and the output weights ``W_o`` (seen
    classes x M), float64 buffers: what the method keeps from task to task."""

    def __init__(self, backbone: Backbone, variant: str, params: dict) -> None:
        super().__init__(backbone, variant, params)
        m = params["M"]
        width = m or backbone.dim
        self.register_buffer("W_rand", torch.randn(backbone.dim, m) if m else None)
        self.register_buffer("G", torch.zeros(width, width, dtype=torch.float64))
        self.register_buffer("C", torch.zeros(width, 0, dtype=torch.float64))
        self.register_buffer("W_o", torch.zeros(0, width, dtype=torch.float64))

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        super().prepare_restore(state)
        for name in ("C", "W_o"):  # grown with the seen classes
            setattr(self, name, torch.empty_like(state[name], device=self.G.device))

    def project(self, f: torch.Tensor) -> torch.Tensor:
        f = f.to(self.G)
        return f if self.W_rand is None else F.relu(f @ self.W_rand.to(self.G))

    def classify(self, f: torch.Tensor) -> torch.Tensor:
        return (self.project(f) @ self.W_o.T).float()


class RanPAC(FirstSessionTemplate):
    """RanPAC as an Avalanche strategy (see the module docstring)."""

    AUTO = {"vit": "adapter", "cnn": "none"}  # the paper: PETL on ViTs, none on ResNets
    uses_frozen = False
    state_attrs = ("ridges",)

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
        self.ridges: list[float] = []
        model = RanpacNet(backbone, self.variant(params, backbone), params)
        super().__init__(
            params=params,
            backbone=backbone,
            model=model,
            device=device,
            plugins=plugins,
            evaluator=evaluator,
        )

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """The float64 M x M Gram matrix G, G + lambda I and its Cholesky factor (the
        ridge solve holds all three), W_rand (d x M, float32), and a task's projected
        features (float64)."""
        width = params["M"] or work.dim
        task = -(-work.train_images // work.n_tasks)
        return [
            *super().memory(params, work),
            Allocation(
                f"the Gram matrix and its ridge solve (3 x {width}^2 float64)",
                3 * width * width * 8,
                "M",
            ),
            Allocation("the random projection W_rand", work.dim * params["M"] * FLOAT, "M"),
            Allocation("a task's projected features", task * width * 8, "M"),
        ]

    def fit(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Accumulate the task's statistics, choose lambda on the task (at or above
        the resolution of the accumulated G), solve."""
        net = self.model
        h = net.project(x)
        n_seen = max(int(y.max()) + 1, net.C.shape[1])
        onehot = F.one_hot(y.to(h.device), n_seen).to(h)
        net.C = torch.cat([net.C, net.C.new_zeros(net.C.shape[0], n_seen - net.C.shape[1])], 1)
        net.G += h.T @ h
        net.C += h.T @ onehot
        order = split_order(len(y), torch.initial_seed(), len(self.ridges))
        lam = choose_ridge(
            h[order.to(h.device)],
            onehot[order.to(h.device)],
            precision=self.params.get("ridge_search", "float64"),
            floor=resolution(net.G),
        )
        self.ridges.append(lam)
        net.W_o = solve_ridge(net.G, net.C, lam).T.contiguous()

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """The backbone adapts on the first task only; every later task adds its
        statistics to the ridge and solves it again (account)."""
        return 1
