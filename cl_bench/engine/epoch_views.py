"""Training on cached augmented views (``augment_views: K``, features-only methods).

With K > 0 the runner gives each training sample as a (1 + K, dim) tensor: row 0
is the feature under the test transform, rows 1..K are K augmented views (see
:mod:`cl_bench.scenarios.augment`). Epoch e of a task trains on view e mod K,
so K = epochs gives every epoch a fresh augmentation, as the official code's
per-epoch data augmentation does, at K backbone passes per training image in
total instead of one per epoch, seed and method. Everything else (prototypes,
evaluation) reads row 0. The choice is made per sample by the datasets'
transforms, so a mini-batch holds (B, dim) features as without views and the
methods need no change; :class:`ViewClock` tells the training transform the epoch.
"""

from __future__ import annotations

import torch
from avalanche.core import SupervisedPlugin

from cl_bench.contract import Bookkeeping


class EpochView:
    """Training transform: a (1 + K, dim) sample -> its view ``epoch mod K``; a
    plain (dim,) feature passes unchanged."""

    def __init__(self) -> None:
        self.epoch = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x[1 + self.epoch % (x.shape[0] - 1)] if x.dim() == 2 else x


def evaluation_view(x: torch.Tensor) -> torch.Tensor:
    """Evaluation transform: a (1 + K, dim) sample -> its test-transform feature."""
    return x[0] if x.dim() == 2 else x


class ViewClock(Bookkeeping, SupervisedPlugin):
    """Sets the :class:`EpochView`'s epoch before each training epoch. Bookkeeping:
    data plumbing, not part of what the method stores."""

    def __init__(self, view: EpochView) -> None:
        super().__init__()
        self.view = view

    def before_training_epoch(self, strategy, **kwargs) -> None:
        self.view.epoch = strategy.clock.train_exp_epochs
