"""L2P: Wang et al., "Learning to Prompt for Continual Learning" (CVPR 2022).
The shared pieces are in prompt_matching.py and prompt_template.py.

A pool of M prompts P_m (L x D) with keys k_m. For an image x with frozen query
q(x) (final [CLS], no prompts):

    s(x)  = top-N m by cos(q(x), k_m)                        N = top_k = 5
    x_p   = [cls, P_s1; ...; P_sN, patches]                  prompt tuning, N L tokens
    f(x)  = mean of the N L prompt-token outputs of the final norm
    y_hat = W f(x) + b
    L     = CE(y_hat over the current task's classes) - lambda sum_{m in s(x)} cos(q(x), k_m)

with M = 10, L = 5, lambda = 0.1. Everything but the pool, the keys and the
head is frozen; trainable at D = 768: 10 x 5 x 768 + 10 x 768 = 46,080 + head.
There is no task-specific prompt: selection is by key matching in training too
(and, with ``batchwise: true``, by batch vote in both phases, as the official
code has it). The prompted pass runs its last block on the [CLS] and prompt rows
only (``PromptedViT``'s ``lean_tail``): f reads nothing else.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract import EVAL_BATCH_SIZE
from cl_bench.contract.memory import Allocation, Workload, backward_pass
from cl_bench.strategies.blocks.prompt_matching import BATCHWISE, PromptKeys, uniform_parameter
from cl_bench.strategies.blocks.prompt_template import (
    Normalize,
    PromptModel,
    PromptStrategy,
    prompt_pool,
)


class L2PNet(PromptModel):
    """Prompt pool + keys + head on the frozen ViT."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        self.prompts = uniform_parameter(params["pool_size"], params["length"], vit.dim)
        self.keys = PromptKeys(params["pool_size"], vit.dim)

    def embed(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        p = self.params
        idx = self.keys.match(q, p["top_k"], p["batchwise"])
        if self.training:
            self.regularizer = -p["pull_weight"] * self.keys.pull(q, idx)
        out = self.vit(x, prompts=self.prompts[idx].flatten(1, 2), lean_tail=True)
        return out.prompts.mean(dim=1)


class L2P(PromptStrategy):
    """L2P as an Avalanche strategy on images."""

    spec = replace(PromptStrategy.spec, protocol=(BATCHWISE, EVAL_BATCH_SIZE))
    model_class = L2PNet

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """The prompt pool, and what the backward pass keeps: the top_k x length
        prompt tokens enter the first block, so gradients flow through every block, each
        over the longer sequence; the last block runs on the [CLS] and prompt rows."""
        prompts = params["top_k"] * params["length"]
        return [
            prompt_pool(params, work),
            backward_pass(work, params, 0, prompts, read_rows=1 + prompts),
        ]

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """One pool for every task, selected by key matching (account)."""
        return 1
