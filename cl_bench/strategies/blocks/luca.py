"""LuCA, TOSCA's per-task module on the frozen final [CLS] feature x (dim d).

    Adapter     A(x) = W2 GELU(W1 x + b1) + b2          d -> d/mlp_ratio -> d
    Calibrator  C(x) = sigmoid(V2 ReLU(V1 x))            d -> d/se_ratio  -> d, no bias
    flows       tosca:      h = LN(x + A(x));   out = h * C(h)
                tosca_r:    out = x * C(x) + LN(A(x))
                adapter:    out = LN(A(x))
                calibrator: out = x * C(x)

At d = 768 and ratios 16: 74,544 + 1,536 (LayerNorm) + 73,728 = 149,808 parameters.
"""

from __future__ import annotations

import torch
from torch import nn

from cl_bench.contract import ProtocolSetting

SELECTION = ProtocolSetting(
    "selection",
    "how TOSCA picks a module at test time: sample, the lowest-entropy module "
    "per image (no task identity); batch, one module per test batch by mean entropy "
    "(official code; on ordered test batches this uses that a batch comes from one task)",
    per_batch=("batch",),
)

FLOWS = ("tosca", "tosca_r", "adapter", "calibrator")


class LuCA(nn.Module):
    def __init__(
        self, dim: int, mlp_ratio: int = 16, se_ratio: int = 16, flow: str = "tosca"
    ) -> None:
        super().__init__()
        if flow not in FLOWS:
            raise ValueError(f"flow must be one of {FLOWS}, got {flow!r}")
        self.flow = flow
        hidden, squeeze = dim // mlp_ratio, dim // se_ratio
        self.adapter = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.norm = nn.LayerNorm(dim)
        self.calibrator = nn.Sequential(
            nn.Linear(dim, squeeze, bias=False),
            nn.ReLU(),
            nn.Linear(squeeze, dim, bias=False),
            nn.Sigmoid(),
        )

    def reset_parameters(self) -> None:
        """Xavier-uniform Linear weights, zero biases, LayerNorm 1/0 (the official
        re-initialisation between tasks)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.flow == "tosca":
            h = self.norm(x + self.adapter(x))
            return h * self.calibrator(h)
        if self.flow == "tosca_r":
            return x * self.calibrator(x) + self.norm(self.adapter(x))
        if self.flow == "adapter":
            return self.norm(self.adapter(x))
        return x * self.calibrator(x)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """H = -sum p log(p + 1e-9) over the last dim, as the official code."""
    p = torch.softmax(logits, dim=-1)
    return -(p * torch.log(p + 1e-9)).sum(-1)


def select_module(logits: torch.Tensor, rule: str) -> torch.Tensor:
    """Index of the chosen module per sample, from stacked logits (T, B, C).

    ``sample``: lowest entropy per image (fair). ``batch``: lowest batch-mean
    entropy, one module for the whole batch (the official rule; with
    class-ordered test batches it leaks task identity).
    """
    h = entropy(logits)
    if rule == "sample":
        return h.argmin(0)
    if rule == "batch":
        return h.mean(1).argmin().expand(logits.shape[1])
    raise ValueError(f"selection must be 'sample' or 'batch', got {rule!r}")
