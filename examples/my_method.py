"""My method: nearest class mean of the frozen backbone's features by Euclidean
distance (SimpleCIL uses the cosine). cl-bench builds it with the keyword arguments
of ``__init__`` and, per task, calls Avalanche's ``train`` then ``eval``; ``spec``
declares the method contract (cl_bench/contract/): experiences hold cached frozen
features, not images; ``Resumable``: a killed run resumes after its last finished task."""

import torch
from avalanche.training.templates import SupervisedTemplate
from torch import nn

from cl_bench.contract import Inputs, Method, MethodSpec, Resumable, Schedule, class_means


class Means(nn.Module):
    """logits = -||f - mu_c||^2, one row mu_c per class seen so far."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.mu = nn.Parameter(torch.empty(0, dim), requires_grad=False)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return -(torch.cdist(f.float(), self.mu) ** 2)


class MyMethod(Method, Resumable, SupervisedTemplate):
    spec = MethodSpec(inputs=Inputs.FEATURES, trains_backbone=False, schedule=Schedule.PER_TASK)

    def __init__(self, *, params, backbone, n_classes, device, plugins, evaluator) -> None:
        model = Means(backbone.dim)
        super().__init__(
            model=model,
            optimizer=torch.optim.SGD([model.mu], lr=0.0),
            criterion=nn.CrossEntropyLoss(),
            train_mb_size=params["batch_size"],
            train_epochs=0,
            eval_mb_size=params["batch_size"],
            device=device,
            plugins=plugins,
            evaluator=evaluator,
        )

    def make_optimizer(self, **kwargs) -> None:
        """Nothing is trained."""

    def _after_training_exp(self, **kwargs) -> None:
        classes, means = class_means(self.experience.dataset.eval(), lambda x: x, self.device)
        mu = torch.zeros(int(classes.max()) + 1, means.shape[1], device=self.device)
        mu[: len(self.model.mu)] = self.model.mu.data
        mu[classes.to(self.device)] = means
        self.model.mu = nn.Parameter(mu, requires_grad=False)
        super()._after_training_exp(**kwargs)
