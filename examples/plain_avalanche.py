"""A plain Avalanche strategy: a ``SupervisedTemplate`` subclass that knows nothing
about cl-bench (no cl-bench import, no contract in the class). Its card,
plain-avalanche.yaml, says what cl-bench needs to drive it (a ``contract:`` block:
inputs, trains_backbone, schedule, and the model factory below); cl-bench builds it
with the model, an optimizer from the card's settings, cross-entropy, the batch
size and epochs, and runs it like any method:

    cl-bench run --cards examples/ --methods plain-avalanche --scenario synthetic
"""

from avalanche.training.templates import SupervisedTemplate
from torch import nn


class PlainNaive(SupervisedTemplate):
    """Avalanche's Naive: fine-tune the model on each experience in turn, with no
    protection against forgetting (a lower bound)."""


def linear_head(backbone, n_classes: int, params: dict) -> nn.Module:
    """The model: one linear layer on the frozen backbone's features (the card's
    ``inputs: features``: experiences hold cached features, not images)."""
    return nn.Linear(backbone.dim, n_classes)
