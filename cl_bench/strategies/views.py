"""Training on cached augmented views (``augment_views: K``, features-only methods).

With K > 0 the runner gives each training sample as a (1 + K, dim) tensor: row 0
is the feature under the test transform, rows 1..K are K augmented views (see
:mod:`cl_bench.scenarios.augment`). Epoch e of a task trains on view e mod K,
so K = epochs gives every epoch a fresh augmentation, as the official code's
per-epoch data augmentation does, at K backbone passes per training image in
total instead of one per epoch, seed and method. Everything else (prototypes,
evaluation) reads row 0. With K = 0 samples are plain (dim,) features and
nothing changes.
"""

from __future__ import annotations

import torch


def eval_view(x: torch.Tensor) -> torch.Tensor:
    """(B, 1 + K, dim) -> the test-transform features (B, dim); (B, dim) unchanged."""
    return x[:, 0] if x.dim() == 3 else x


def train_view(x: torch.Tensor, epoch: int) -> torch.Tensor:
    """(B, 1 + K, dim) -> augmented view ``epoch mod K`` (B, dim); (B, dim) unchanged."""
    if x.dim() != 3:
        return x
    return x[:, 1 + epoch % (x.shape[1] - 1)]


class ViewPerEpoch:
    """Strategy mixin: the mini-batch's features are the epoch's view in training
    and the test-transform features otherwise."""

    def _unpack_minibatch(self) -> None:
        super()._unpack_minibatch()
        x = self.mbatch[0]
        self.mbatch[0] = (train_view(x, self.clock.train_exp_epochs) if self.is_training
                          else eval_view(x))
