"""Pieces shared by the prompt methods (L2P, DualPrompt, CODA-Prompt).

Key-query matching (L2P section 4.2, DualPrompt section 4.2). The query q(x) is
the frozen final [CLS] of the image without prompts; each prompt m of a pool
has a learnable key k_m, and

    gamma(q, k_m) = cos(q, k_m),      s(x) = the top-k m by gamma(q(x), k_m)

(k = 5 for L2P, 1 for DualPrompt). Pull constraint (the surrogate loss that
pulls the chosen keys toward the queries that chose them), subtracted from the
cross-entropy with weight lambda:

    L_pull = (1 / B) sum_b sum_{m in s(x_b)} cos(q_b, k_m)

i.e. summed over the k matches, averaged over the batch, as the papers' sum
over s(x) and the official code (``reduce_sim``) have it.

Batch-wise selection (``batchwise: true``, the official configs): every image
of a batch uses the k prompt ids chosen most often in that batch. With
class-ordered test batches this leaks task identity; it is a recorded setting.

Logit masking (every peer): during training only the current task's classes
compete (old and unseen classes at -inf); in evaluation every class seen in
training does, classes not seen yet are at -inf.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from cl_bench.contract import ProtocolSetting

BATCHWISE = ProtocolSetting(
    "batchwise",
    "whether a prompt method chooses its prompts once per test batch (true, "
    "the official configs) or per image (false)",
    label=((True, "batchwise"), (False, "per-image prompts")),
    per_batch=(True,),
)


def uniform_parameter(*shape: int, low: float = -1.0, high: float = 1.0) -> nn.Parameter:
    """U(low, high) initialisation, the official codes' ``prompt_init: uniform``."""
    return nn.Parameter(torch.empty(*shape).uniform_(low, high))


def cosine(q: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """cos(q_b, k_m) for every query and key: (B, D), (M, D) -> (B, M)."""
    return F.normalize(q, dim=-1) @ F.normalize(keys, dim=-1).T


def majority_vote(idx: torch.Tensor, pool_size: int) -> torch.Tensor:
    """The k ids chosen most often in the batch, for every image: (B, k) -> (B, k).

    Ties go to the lower id (the peers' ``torch.topk`` on counts leaves them to
    the kernel). Counted by comparison with every id rather than ``torch.bincount``,
    which on a GPU reads the largest id back to size its output (a sync at every
    batch); the counts are the same integers.
    """
    ids = torch.arange(pool_size, device=idx.device)
    counts = (idx.reshape(-1, 1) == ids).sum(0)
    top = torch.sort(counts, descending=True, stable=True).indices[: idx.shape[1]]
    return top.expand(idx.shape[0], -1).clone()


class PromptKeys(nn.Module):
    """Learnable keys of a prompt pool, matched to queries by cosine similarity."""

    def __init__(self, pool_size: int, dim: int) -> None:
        super().__init__()
        self.keys = uniform_parameter(pool_size, dim)

    @property
    def pool_size(self) -> int:
        return self.keys.shape[0]

    def match(self, q: torch.Tensor, top_k: int, batchwise: bool) -> torch.Tensor:
        """Prompt ids s(x), (B, top_k), by decreasing similarity (or batch vote)."""
        idx = cosine(q, self.keys).topk(top_k, dim=1).indices
        return majority_vote(idx, self.pool_size) if batchwise else idx

    def pull(self, q: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """L_pull: matched cosines summed over the k ids, averaged over the batch."""
        return cosine(q, self.keys).gather(1, idx).sum() / q.shape[0]


def class_mask(
    n_classes: int, allowed: Sequence[int] | torch.Tensor, device: torch.device | None = None
) -> torch.Tensor:
    """Boolean (n_classes,), True where a logit must be masked (not in ``allowed``)."""
    mask = torch.ones(n_classes, dtype=torch.bool, device=device)
    mask[torch.as_tensor(allowed, dtype=torch.long, device=device)] = False
    return mask


def mask_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """-inf where ``mask`` is True (out of place: logits may require grad)."""
    return logits.masked_fill(mask, float("-inf"))
