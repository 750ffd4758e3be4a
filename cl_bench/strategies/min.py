"""MiN: Jiang, Shi, Zhang, Zhang, Li, "Mixture of Noise for Pre-Trained Model-Based
Class-Incremental Learning" (NeurIPS 2025, arXiv 2509.16738). Read from the authors'
code (github.com/thuwng/MiN-NeurIPS2025 at 292d883: ``MiN/models/MiN.py``,
``MiN/utils/inc_net.py``, ``MiN/backbones/ViT_MiN.py``, ``MiN/configs/*``); departures
in methods/min.yaml.

Backbone: the frozen ViT with noise after every block and the method's own norms
(:mod:`cl_bench.strategies.blocks.noise`); f(x) its final-norm [CLS]. Features for the
classifiers: phi(x) = relu(f(x) P), P a fixed random D x M matrix (``buffer_size``
columns, float64, drawn as nn.Linear draws a weight: uniform within +-1/sqrt(M)).

Classifier: the ridge solution W = (Phi^T Phi + gamma I)^-1 Phi^T Y on every training
sample fitted so far (one-hot Y over the seen classes), kept by recursive least squares
(:mod:`cl_bench.strategies.blocks.analytic`); logits phi(x) W over the seen classes.

Task t, as the official ``init_train`` / ``increment_train`` order it:

1. t > 0: fit W on ``fit_epochs`` passes over the task's training images in their
   training transform, under the backbone as it was after task t - 1;
2. add task t's noise generators; set the mixing weights from the prototypes of tasks
   0 .. t-1 (``mixing_weights``: zero for t <= 1);
3. train with SGD, cross-entropy over the seen classes, on the logits
     t = 0:  H phi(x) + b                        H, b: a fresh zero head, task 0's classes
     t > 0:  H phi(x) + phi(x) W (W fixed, no gradient)   H: a fresh zero head, no bias
   what trains: t = 0 the first noise generators, every M_l and the norms; t > 0 task
   t's noise generators; always H (the head is dropped after the task);
4. the prototype p_t: the mean f(x) over the task's training images (training transform);
5. t = 0: fit W on ``fit_epochs`` passes over the training images (training transform);
   every t: fit W on one pass over them in the evaluation transform.

One backbone pass per test image (the noise modules run inside it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cl_bench.backbones.base import autocast
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract.loading import method_loader
from cl_bench.contract.memory import FLOAT, Allocation, Workload, backward_pass
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.strategies.blocks.adapter_template import AdapterModel, AdapterStrategy, Normalize
from cl_bench.strategies.blocks.analytic import RecursiveRidge
from cl_bench.strategies.blocks.noise import (
    NoiseLayer,
    linear_draw,
    mixing_weights,
    noised,
    norm_copies,
    task_noise_set,
    zero_linear,
)

DOUBLE = 8  # bytes of a float64


class MinNet(AdapterModel):
    """The noise (``sets``: one set of generators per task; ``layers``: M_l, A_l, B_l),
    the norm copies, the random projection, the analytic classifier, the prototypes and
    the mixing weights; the training head while a task trains."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        d, m = vit.dim, params["buffer_size"]
        self.layers = nn.ModuleList([NoiseLayer(d, params["hidden_dim"]) for _ in range(vit.depth)])
        self.norms = norm_copies(vit.vit)
        self.register_buffer("projection", linear_draw(d, m, torch.float64))
        self.analytic = RecursiveRidge(m, params["gamma"])
        self.register_buffer("prototypes", torch.zeros(0, d))
        self.register_buffer("mix", torch.zeros(0))
        self.head: nn.Linear | None = None

    def new_set(self) -> nn.ModuleList:
        return task_noise_set(self.vit.depth, self.params["hidden_dim"])

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        super().prepare_restore(state)
        self.prototypes = torch.empty_like(state["prototypes"])
        self.mix = torch.empty_like(state["mix"])
        self.analytic.W = torch.empty_like(state["analytic.W"])

    def begin_task(self, task: int, classes: list[int]) -> None:
        """Task bookkeeping and the classifier's columns for the new classes; the
        noise comes with :meth:`add_noise`, after the classifier's first fit."""
        super().begin_task(task, classes)
        self.analytic.grow(len(self.order))

    def add_noise(self) -> None:
        """Step 2 of the module docstring, and what trains on this task."""
        device = self.projection.device
        if len(self.sets) <= self.task:
            self.sets.append(self.new_set().to(device))
        self.mix = mixing_weights(self.prototypes, len(self.sets))
        self.requires_grad_(False)
        self.sets[self.task].requires_grad_(True)
        if self.task == 0:
            self.layers.requires_grad_(True)
            self.norms.requires_grad_(True)
        self.head = zero_linear(
            self.params["buffer_size"], len(self.order), bias=self.task == 0
        ).to(device)

    def end_task(self, prototype: torch.Tensor) -> None:
        """Keep the task's prototype; the training head is not kept."""
        self.prototypes = torch.cat([self.prototypes, prototype[None].to(self.prototypes)])
        self.head = None

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """f(x): the final-norm [CLS] of normalised images under the mixed noise."""
        with noised(self.vit.vit, self.layers, list(self.sets), self.mix, self.norms):
            return self.vit(x).cls

    def project(self, f: torch.Tensor) -> torch.Tensor:
        """phi = relu(f P), float64."""
        return F.relu(f.to(self.projection) @ self.projection)

    def columns(self, labels: torch.Tensor) -> torch.Tensor:
        """The classifier column of each class id."""
        return self.cached("column_of_class", labels.device, self.column_of_class)[labels]

    def column_of_class(self) -> torch.Tensor:
        """(n_classes,): the classifier column of every class id, -1 where not seen."""
        lookup = torch.full((self.n_classes,), -1, dtype=torch.long)
        lookup[self.order] = torch.arange(len(self.order))
        return lookup

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] -> logits over all classes (-inf where not seen): in
        training the head's (plus the fixed analytic logits after the first task),
        else the analytic classifier's."""
        phi = self.project(self.embed(self.normalize(x)))
        if self.training and self.head is not None:
            out = self.head(phi.float()).double()
            if self.task > 0:
                out = out + self.analytic(phi.detach())
        else:
            out = self.analytic(phi)
        return self.spread(out.float(), self.cached("order", x.device))

    @torch.no_grad()
    def fit(self, dataset, passes: int, device: torch.device, precision: str) -> None:
        """``passes`` passes of recursive least squares over ``dataset`` (one chunk per
        ``fit_batch_size`` images, in dataset order)."""
        was_training = self.training
        self.eval()
        for _ in range(passes):
            for x, y, *_ in method_loader(dataset, self.params["fit_batch_size"]):
                with autocast(device, precision):
                    f = self.embed(self.normalize(x.to(device)))
                targets = F.one_hot(self.columns(y.to(device)), self.analytic.n_outputs)
                self.analytic.update(self.project(f.float()), targets)
        self.train(was_training)

    @torch.no_grad()
    def prototype(self, dataset, device: torch.device, precision: str) -> torch.Tensor:
        """The mean f(x) over ``dataset``."""
        total, count = None, 0
        for x, *_ in method_loader(dataset, self.params["eval_batch_size"]):
            with autocast(device, precision):
                f = self.embed(self.normalize(x.to(device))).float().sum(0)
            total, count = (f if total is None else total + f), count + len(x)
        return total / count


class Min(AdapterStrategy):
    """MiN as an Avalanche strategy on images."""

    model_class = MinNet
    injects = "adds noise modules after transformer blocks and replaces their norms"

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """R (M x M, float64, updated in place), the projection and the classifier,
        one noise set per task, and what the backward pass keeps: the noise joins
        every block's output, so gradients flow through every block after the first."""
        m, h = params["buffer_size"], params["hidden_dim"]
        per_set = work.blocks * 2 * (h * h + h) * FLOAT
        return [
            Allocation(f"the least-squares R ({m}^2 float64)", m * m * DOUBLE, "buffer_size"),
            Allocation(
                f"the random projection ({work.dim} x {m} float64) and the classifier",
                (work.dim + work.n_classes) * m * DOUBLE,
                "buffer_size",
            ),
            Allocation(
                f"{work.n_tasks} noise set(s) of width {h}", work.n_tasks * per_set, "hidden_dim"
            ),
            backward_pass(work, params, 1),
        ]

    def build_optimizer(self, model: MinNet):
        """One SGD over what trains on this task (official get_optimizer over the
        parameters with requires_grad)."""
        return make_optimizer(self.params, model.parameters())

    def model_adaptation(self, model=None):
        model = super().model_adaptation(model)
        if self.is_training:
            first = model.task == 0
            self.train_epochs = self.params["init_epochs" if first else "epochs"]
            if not first:
                model.fit(
                    self.experience.dataset.train(),
                    self.params["fit_epochs"],
                    self.device,
                    self.precision,
                )
            model.add_noise()
        return model

    def _after_training_exp(self, **kwargs) -> None:
        model, data = self.model, self.experience.dataset
        model.eval()
        model.end_task(model.prototype(data.train(), self.device, self.precision))
        if model.task == 0:
            model.fit(data.train(), self.params["fit_epochs"], self.device, self.precision)
        model.fit(data.eval(), 1, self.device, self.precision)
        super()._after_training_exp(**kwargs)

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """The first task trains its own head and every norm; the second has no
        earlier prototype to mix (account)."""
        return 2
