"""MiN's mixture of noise inside a frozen timm ViT (Jiang et al., "Mixture of Noise for
Pre-Trained Model-Based Class-Incremental Learning", NeurIPS 2025, arXiv 2509.16738),
as the authors' code builds it (github.com/thuwng/MiN-NeurIPS2025 at 292d883,
``MiN/backbones/ViT_MiN.py``: ``PiNoise``, ``VisionTransformer.forward_features``).

After block l of the ViT, on all its output tokens y (B, N, D):

    z  = y A_l                                          A_l: D x h, fixed random
    n  = sum_k w_k (mu_lk(z) + sigma_lk(z))            one (mu, sigma) pair per task k
    y' = M_l(y) + n B_l + y                             B_l: h x D, fixed random

mu_lk and sigma_lk are h -> h linear maps (with bias), zero at creation, trained on
task k only; M_l is a D -> D linear map (with bias), zero at creation, trained on the
first task only. A_l and B_l are drawn once, as nn.Linear draws its weight
(Kaiming-uniform, a = sqrt 5, on the D x h and h x D tensors: bounds 1/sqrt(h) and
1/sqrt(D)), and never trained. The authors' code adds mu and sigma: no sample of a
unit Gaussian scales sigma, so the pair is one linear map stored twice.

The mixing weights w (one per task, shared by all blocks) are set when task t starts,
from the prototypes p_0 .. p_{t-1} of the tasks before it (the mean final [CLS] of a
task's training images after training on it, :func:`mixing_weights`).

The first task also trains the block norms (norm1, norm2) and the final norm: the
method keeps its own copies (:func:`norm_copies`), which replace the frozen ones in its
passes; the shared backbone is never changed. Injection uses timm's public modules
only, scoped to one call (:func:`noised`): a forward hook on each block replaces its
output by y', and the norms' ``forward`` is shadowed by the copies'.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn


def zero_linear(d_in: int, d_out: int, bias: bool = True) -> nn.Linear:
    """A linear map whose weight (and bias) start at zero (official constant_(0) inits)."""
    layer = nn.Linear(d_in, d_out, bias=bias)
    nn.init.zeros_(layer.weight)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


def linear_draw(rows: int, cols: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A rows x cols tensor drawn as nn.Linear.reset_parameters draws its weight
    (Kaiming-uniform, a = sqrt 5: uniform within +-1/sqrt(cols)), how the official
    ``PiNoise`` and ``RandomBuffer`` fill their fixed matrices."""
    out = torch.empty(rows, cols, dtype=dtype)
    nn.init.kaiming_uniform_(out, a=math.sqrt(5))
    return out


class TaskNoise(nn.Module):
    """One task's noise generator in one block: z -> mu(z) + sigma(z)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.mu = zero_linear(hidden, hidden)
        self.sigma = zero_linear(hidden, hidden)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.mu(z) + self.sigma(z)


def task_noise_set(depth: int, hidden: int) -> nn.ModuleList:
    """One task's noise generators, one per block."""
    return nn.ModuleList([TaskNoise(hidden) for _ in range(depth)])


class NoiseLayer(nn.Module):
    """What block l's noise keeps across tasks: M_l (trained on the first task) and the
    fixed A_l, B_l."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.mlp = zero_linear(dim, dim)
        self.register_buffer("down", linear_draw(dim, hidden))
        self.register_buffer("up", linear_draw(hidden, dim))

    def forward(
        self, y: torch.Tensor, noises: Sequence[TaskNoise], weights: torch.Tensor
    ) -> torch.Tensor:
        """y' = M(y) + (sum_k w_k noise_k(y A)) B + y (the official order of the sums)."""
        z = y @ self.down.to(y.dtype)
        mixed = None
        for noise, w in zip(noises, weights, strict=True):
            term = noise(z) * w
            mixed = term if mixed is None else mixed + term
        out = self.mlp(y)
        if mixed is not None:
            out = out + mixed @ self.up.to(mixed.dtype)
        return out + y


def mixing_weights(prototypes: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` mixing weights set when task ``count - 1`` starts, from the
    prototypes (rows) of the tasks before it (official ``PiNoise.init_weight_noise``):
    all zero while at most one prototype exists; else, with p the newest prototype,
    softmax over [cos(p, p_0), ..., cos(p, p_{t-1}), 1] (the last entry, the new task's,
    stays 1)."""
    if len(prototypes) <= 1:
        return torch.zeros(count, device=prototypes.device)
    scores = torch.ones(count, device=prototypes.device)
    newest = prototypes[-1]
    for i, p in enumerate(prototypes):
        scores[i] = torch.dot(newest, p) / (torch.norm(newest) * torch.norm(p))
    return torch.softmax(scores, dim=-1)


def norm_copies(vit: VisionTransformer) -> nn.ModuleList:
    """fp32 copies of every block's norm1 and norm2 and of the final norm, in that
    order (block 0's norm1, norm2, block 1's, ..., final)."""
    norms = [n for block in vit.blocks for n in (block.norm1, block.norm2)] + [vit.norm]
    return nn.ModuleList([copy.deepcopy(n).float() for n in norms])


@contextmanager
def noised(
    vit: VisionTransformer,
    layers: Sequence[NoiseLayer],
    noises: Sequence[Sequence[TaskNoise]],
    weights: torch.Tensor,
    norms: Sequence[nn.Module],
) -> Iterator[None]:
    """Within the context, ``vit`` runs with the noise after every block (``noises[k][l]``:
    task k's generator in block l, mixed by ``weights[k]``) and the norms of
    :func:`norm_copies` in place of its own."""
    blocks = list(vit.blocks)
    targets = [n for block in blocks for n in (block.norm1, block.norm2)] + [vit.norm]
    with ExitStack() as stack:
        for index, block in enumerate(blocks):
            layer, per_task = layers[index], [task[index] for task in noises]

            def add(
                _module: nn.Module,
                _args: tuple,
                output: torch.Tensor,
                layer=layer,
                per_task=per_task,
            ) -> torch.Tensor:
                return layer(output, per_task, weights)

            stack.callback(block.register_forward_hook(add).remove)
        for target, own in zip(targets, norms, strict=True):
            target.forward = own.forward
            stack.callback(delattr, target, "forward")
        yield
