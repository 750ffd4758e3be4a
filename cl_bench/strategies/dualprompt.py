"""DualPrompt: Wang et al., "DualPrompt: Complementary Prompting for
Rehearsal-free Continual Learning" (ECCV 2022).

Prefix tuning: a prompt p = (p_K, p_V) adds learned keys and values to a
block's self-attention, f_prefix(h) = MSA(h W_Q, [p_K; h W_K], [p_V; h W_V]).
Here a prompt of length L holds L key tokens and L value tokens (the official
code's (2, L) layout, which the parameter counts of
tests/integration/test_prompt_methods.py assume).

    G-prompt g_l, l in {0, 1}: shared by all tasks,          L_g = 5
    E-prompts e_{m,l}, l in {2, 3, 4}, m = 1..M, key k_m:    L_e = 5, M = 10
    task t trains e_t (its own prompt; when t >= M, the matched one)
    test: m(x) = argmax_m cos(q(x), k_m)                     (routing: m(x) == task?)
    y_hat = W h_cls(x; g, e_m(x)) + b
    L     = CE(y_hat over the current task's classes) - lambda cos(q(x), k_m)

with lambda = 0.1. At the start of task t > 0, e_t is initialised from
e_{t-1} (the official ``shared_prompt_pool``). Trainable at D = 768:
G 2 x 2 x 5 x 768 = 15,360, E 3 x 2 x 10 x 5 x 768 = 230,400, keys 7,680;
253,440 + head.

``reshape_bug: true`` reproduces the PyTorch port used by PILOT and Mammoth
(PILOT issue 29, Mammoth ``--use_permute_fix``): the gathered E-prompts,
(layers, 2, B, 1, L, D), are ``reshape``d to (layers, B, 2, L, D) where a
``permute`` of the (2, B) axes is needed. Image b then gets, as its key and
its value prefix, the entries at flat positions 2b and 2b + 1 of the
(key/value, image) grid: the first half of a batch gets the key prompts of
two images, the second half their value prompts (the same as the fix only
for B = 1). In training every image uses e_t, so the first half runs with
(K_t, K_t) and the second with (V_t, V_t).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from cl_bench.backbones.base import Backbone
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract import EVAL_BATCH_SIZE
from cl_bench.errors import UserError
from cl_bench.strategies.blocks.prompt_matching import BATCHWISE, PromptKeys, uniform_parameter
from cl_bench.strategies.blocks.prompt_template import Normalize, PromptModel, PromptStrategy


def gather_e_prompts(pool: torch.Tensor, idx: torch.Tensor, reshape_bug: bool) -> torch.Tensor:
    """Batched E-prompts (layers, B, 2, k L, D) from the pool (layers, 2, M, L, D)
    and prompt ids (B, k); ``reshape_bug`` as in the module docstring."""
    raw = pool[:, :, idx]  # (layers, 2, B, k, L, D)
    layers, dual, b, k, length, dim = raw.shape
    if not reshape_bug:
        raw = raw.permute(0, 2, 1, 3, 4, 5)
    return raw.reshape(layers, b, dual, k * length, dim)


class DualPromptNet(PromptModel):
    """G-prompt, E-prompt pool with keys, and head on the frozen ViT."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        p = params
        self.g = uniform_parameter(len(p["g_layers"]), 2, p["g_length"], vit.dim)
        self.e = uniform_parameter(len(p["e_layers"]), 2, p["pool_size"], p["e_length"], vit.dim)
        self.keys = PromptKeys(p["pool_size"], vit.dim)

    def begin_task(self, task: int, classes: list[int]) -> None:
        super().begin_task(task, classes)
        if self.params["init_from_previous"] and 0 < task < self.keys.pool_size:
            with torch.no_grad():
                self.e[:, :, task] = self.e[:, :, task - 1]

    def embed(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        p, b = self.params, x.shape[0]
        if self.training and self.task < self.keys.pool_size:
            idx = torch.full((b, 1), self.task, dtype=torch.long, device=x.device)
        else:
            idx = self.keys.match(q, 1, p["batchwise"])
        if self.training:
            self.regularizer = -p["pull_weight"] * self.keys.pull(q, idx)
        else:
            self.routing = idx[:, 0]
        e = gather_e_prompts(self.e, idx, p["reshape_bug"])
        prefixes = {
            layer: (self.g[i, 0].expand(b, -1, -1), self.g[i, 1].expand(b, -1, -1))
            for i, layer in enumerate(p["g_layers"])
        }
        prefixes |= {layer: (e[i, :, 0], e[i, :, 1]) for i, layer in enumerate(p["e_layers"])}
        return self.vit(x, prefixes=prefixes).cls


class DualPrompt(PromptStrategy):
    """DualPrompt as an Avalanche strategy on images."""

    spec = replace(PromptStrategy.spec, protocol=(BATCHWISE, EVAL_BATCH_SIZE))
    model_class = DualPromptNet

    def routing(self) -> torch.Tensor | None:
        """The E-prompt chosen per sample of the last evaluated batch."""
        return self.model.routing

    @classmethod
    def check_params(cls, params: dict, backbone: Backbone) -> None:
        super().check_params(params, backbone)
        if set(params["g_layers"]) & set(params["e_layers"]):
            raise UserError(
                f"dualprompt: g_layers {params['g_layers']} and e_layers "
                f"{params['e_layers']} must not share a block."
            )

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """The first ``pool_size`` tasks train their own E-prompt; every later one trains
        the matched one, so training adds the key matching (account)."""
        return min(n_tasks, params["pool_size"])
