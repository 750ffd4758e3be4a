"""Finetune: sequential fine-tuning, the lower bound of class-incremental learning.

Task t trains backbone and head on task t's data only, with cross-entropy over
all classes seen so far (unseen classes masked, old classes kept):

    L_t = CE(softmax over C_{<=t} of W f_theta(x), y),   (x, y) in D_t.

Nothing protects old classes: with no old data in D_t, their logits are only
pushed down, so the model forgets them (catastrophic forgetting). PILOT's
``finetune`` baseline is the same up to one choice: after the first task it
computes the loss over the new task's logits only (old logits masked); here
old logits stay in the softmax, the plain lower bound.
"""

from __future__ import annotations

from cl_bench.strategies.blocks.backbone_copy import FinetuneTemplate


class Finetune(FinetuneTemplate):
    """Plain sequential fine-tuning of a private copy of the backbone + a linear head."""

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """Every task trains the same copy and adds its classes' rows (account)."""
        return 1
