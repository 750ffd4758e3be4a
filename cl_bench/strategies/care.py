"""CaRE: Lou, Fu, Yu, "Scaling Continual Learning to 300+ Tasks with Bi-Level Routing
Mixture-of-Experts" (ICML 2026, arXiv 2602.03473). Read from the authors' code
(github.com/LMMMEng/CaRE at d90800a: ``models/care.py``, ``backbone/vit_brmoe.py``,
``backbone/linears.py`` ``TunaLinear``, ``exps/*/*.json``); departures in
methods/care.yaml.

A frozen ViT with a bi-level routing mixture of adapter experts on every block (one
expert, router and class perceptor per task and block, one shared adapter per block:
:mod:`cl_bench.strategies.blocks.routed_moe`). The classifier is cosine, one block of
rows W_k per task (no bias, no learnt scale), every block trained at every task.

Training loss on a batch of task t, with f the final-norm [CLS] of the forced pass for
task t, z_l = P_t^l(c_t^l) the current perceptor's output at block l, y the label
within task t's classes, s = ``scale``, m = ``margin`` and CosFace(a, y) =
CE(s (a - m onehot(y))):

    CosFace(cos(f, W_t), y) + (1/L) sum_l [ A(z_l, y) + KL_l ] / 2

A = CosFace (``perceptor_loss: cosface``; on the raw perceptor outputs, as official)
or CE(z_l, y) (``ce``); with ``perceptor_kl``, KL_l = tau^2 KL(softmax(cos(f, W_t) /
tau) || softmax(z_l / tau)), the teacher detached, tau = 1 on the first 6 blocks and 2
after (official ``t = 1 if idx < 6 else 2``); without it the bracket is A alone, not
halved.

Schedule: task 0 trains ``epochs`` epochs (cosine to 0). A later task trains in two
stages of ``epochs // 2`` epochs (at least 1): the first with a cosine schedule from
``lr`` to ``lr / 2``, then the class statistics and a classifier alignment, then the
second stage from the rate the first ended at, cosine to 0, with a fresh optimizer.
The shared adapters follow the EMA of the routed_moe block (``ema_decay``) in every
stage after the first task.

After each task: per class of task t, the mean and covariance (+ 1e-4 I; the
variances with ``ca_storage: variance``) of f under the forced pass for t; for t > 0
the classifier is aligned on Gaussian samples of every seen class, as TUNA's is
(:func:`cl_bench.strategies.blocks.cosine_alignment.align_classifier`: the same official routine).

Inference, with p_k = softmax(s cos(f_k(x), W)), f_k the forced pass for task k and
f_R the routed pass: after T = t + 1 tasks, for 1 <= t <= ``iter_pred_max_task``
(official ``iter_pred``: 60),

    output = p_{k*} + p_R,   k* = argmin_k H(p_k)    (T + 1 backbone passes per image)

else (the first task, or beyond that task) s cos(f_R(x), W) from one pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cl_bench.backbones.base import autocast
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract.loading import method_loader
from cl_bench.contract.memory import FLOAT, Allocation, Workload, adapter_sets, backward_pass
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.strategies.blocks.adapter_template import AdapterModel, AdapterStrategy, Normalize
from cl_bench.strategies.blocks.cosine_alignment import align_classifier, combine
from cl_bench.strategies.blocks.gaussian_alignment import class_gaussians
from cl_bench.strategies.blocks.routed_moe import MoEPass, RoutedMoE

KL_BLOCKS_AT_TAU_1 = 6  # official: temperature 1 on the first 6 blocks' perceptors, 2 after


def cosface(cos: torch.Tensor, y: torch.Tensor, scale: float, margin: float) -> torch.Tensor:
    """CE(s (cos - m onehot(y))): the official AngularPenaltySMLoss('cosface')."""
    return F.cross_entropy(scale * (cos - margin * F.one_hot(y, cos.shape[1]).to(cos)), y)


def perceptor_loss(
    latents: list[torch.Tensor], teacher: torch.Tensor, y: torch.Tensor, params: dict
) -> torch.Tensor:
    """(1/L) sum_l [A(z_l, y) + KL_l] / 2 over the blocks' perceptor outputs ``latents``
    (module docstring); ``teacher``: the current task's cosine logits."""
    s, m = params["scale"], params["margin"]
    teacher = teacher.detach()
    terms = []
    for block, z in enumerate(latents):
        z = z.float()
        hard = (
            cosface(z, y, s, m) if params["perceptor_loss"] == "cosface" else F.cross_entropy(z, y)
        )
        if params["perceptor_kl"]:
            tau = 1.0 if block < KL_BLOCKS_AT_TAU_1 else 2.0
            soft = F.kl_div(
                F.log_softmax(z / tau, dim=1),
                F.softmax(teacher / tau, dim=1),
                reduction="batchmean",
            )
            hard = (hard + soft * tau**2) / 2
        terms.append(hard)
    return torch.stack(terms).mean()


class CareNet(AdapterModel):
    """The routed experts (``sets[0]``: a :class:`RoutedMoE`), the per-task cosine
    classifier blocks and the class statistics."""

    def __init__(
        self, vit: PromptedViT, normalize: Normalize, n_classes: int, params: dict
    ) -> None:
        super().__init__(vit, normalize, n_classes, params)
        d = vit.dim
        self.head = nn.ParameterList()  # W_k, one (classes of task k, d) block per task
        self.register_buffer("means", torch.zeros(0, d))
        full = params["ca_storage"] == "covariance"
        self.register_buffer("covs", torch.zeros((0, d, d) if full else (0, d)))
        self.route: torch.Tensor | None = None  # the chosen forced pass per image
        self.latents: list[torch.Tensor] = []  # the last training batch's perceptor outputs
        self.teacher: torch.Tensor | None = None  # and its current-task cosine logits

    def new_set(self) -> RoutedMoE:
        p = self.params
        return RoutedMoE(
            self.vit.dim,
            range(self.vit.depth),
            p["expert_ffn"],
            p["shared_ffn"],
            p["dropout"],
            p["routers"],
            p["experts"],
        )

    @property
    def moe(self) -> RoutedMoE:
        return self.sets[0]

    def begin_task(self, task: int, classes: list[int]) -> None:
        """Add the task's expert, router and perceptor per block (the earlier ones
        frozen) and its classifier block (trunc normal, std 0.02, as official)."""
        super().begin_task(task, classes)
        if self.moe.n_tasks <= task:
            self.moe.add_task(len(classes))
        if len(self.head) <= task:
            block = torch.empty(len(classes), self.vit.dim, device=self.means.device)
            self.head.append(nn.Parameter(nn.init.trunc_normal_(block, std=0.02)))

    def prepare_restore(self, state: dict[str, torch.Tensor]) -> None:
        """Add the tasks a checkpoint holds (their shapes are set from it when loaded)."""
        super().prepare_restore(state)
        first = f"sets.0.layers.{self.moe.blocks[0]}.experts."
        tasks = len({n[len(first) :].split(".")[0] for n in state if n.startswith(first)})
        while self.moe.n_tasks < tasks:
            self.moe.add_task(1)
        while len(self.head) < tasks:
            self.head.append(nn.Parameter(torch.empty(0)))
        for name in ("means", "covs"):
            setattr(self, name, torch.empty_like(state[name]))

    def cosine(self, f: torch.Tensor) -> torch.Tensor:
        """cos(f, W) over every seen class, in classifier order."""
        w = torch.cat(list(self.head))
        return F.linear(F.normalize(f.float(), dim=-1), F.normalize(w, dim=-1))

    def embed(self, x: torch.Tensor, task: int | None) -> tuple[torch.Tensor, MoEPass]:
        """Final-norm [CLS] of normalised images under the forced pass for ``task`` or
        the routed pass (None), and the pass (its perceptor outputs)."""
        moe_pass = self.moe.routed() if task is None else self.moe.forced(task)
        return self.vit(x, adapters=moe_pass).cls, moe_pass

    def iterates(self) -> bool:
        """Whether inference runs the T + 1 passes (module docstring)."""
        p = self.params
        return p["iter_pred"] and 1 <= self.task <= p["iter_pred_max_task"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] -> logits over all classes (-inf where not allowed): in
        training s cos over the current task's classes, else the output of inference."""
        x = self.normalize(x)
        s = self.params["scale"]
        if self.training:
            if self.task > 0:
                self.moe.pull_shared(self.params["ema_decay"])
            f, moe_pass = self.embed(x, self.task)
            self.latents = moe_pass.latents
            self.teacher = self.cosine(f)[:, -len(self.current) :]
            return self.spread(s * self.teacher, self.cached("current", x.device))
        order = self.cached("order", x.device)
        routed = s * self.cosine(self.embed(x, None)[0])
        if not self.iterates():
            self.route = None
            return self.spread(routed, order)
        forced = torch.stack([s * self.cosine(self.embed(x, k)[0]) for k in range(self.task + 1)])
        out, self.route = combine(forced, routed)
        return self.spread(out, order)

    @torch.no_grad()
    def set_statistics(self, dataset, device: torch.device, precision: str) -> None:
        """Mean and covariance (+ 1e-4 I) of f under the forced pass for the current task,
        per current class (once per stage: :func:`class_gaussians` syncs per class)."""
        feats, labels = [], []
        for x, y, *_ in method_loader(dataset, self.params["eval_batch_size"]):
            with autocast(device, precision):
                feats.append(self.embed(self.normalize(x.to(device)), self.task)[0].float())
            labels.append(y.to(device))
        self.means, self.covs = class_gaussians(
            torch.cat(feats),
            torch.cat(labels),
            self.current.tolist(),
            self.means,
            self.covs,
            len(self.task_of_class),
        )


def stage_epochs(params: dict) -> int:
    """Epochs of each of a later task's two training stages: ``epochs // 2``, at least 1."""
    return max(1, params["epochs"] // 2)


class Care(AdapterStrategy):
    """CaRE as an Avalanche strategy on images."""

    model_class = CareNet
    injects = "puts routed adapter experts into transformer blocks"

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """One expert set per task and the shared set, the routers (a score per earlier
        expert: T (T + 1) / 2 rows of d per block), a d x d covariance per class
        (``ca_storage: covariance``), the alignment's samples, every expert's output on
        every token of a training batch (the mixture reads them all), and what the
        backward pass keeps (adapters beside every block's MLP)."""
        d, n, t = work.dim, work.n_classes, work.n_tasks
        per_class = d * d if params["ca_storage"] == "covariance" else d
        drawn = params["batch_size"] * params["ca_samples"] * n * d * FLOAT
        routers = work.blocks * (t * (t + 1) // 2) * (d + 1) * FLOAT
        outputs = work.blocks * t * params["batch_size"] * work.tokens * d
        return [
            adapter_sets(work, params["expert_ffn"], t, "expert_ffn"),
            adapter_sets(work, params["shared_ffn"], 1, "shared_ffn"),
            Allocation("the routers", routers, "routers"),
            Allocation("the class statistics", n * per_class * FLOAT, "ca_storage"),
            Allocation("the classifier alignment's samples", drawn, "ca_samples"),
            Allocation(
                "every expert's output in a training batch",
                outputs * work.activation_bytes,
                "batch_size",
                backward=True,
            ),
            backward_pass(work, params, 1),
        ]

    @classmethod
    def repeats_after(cls, params: dict, n_tasks: int) -> int | None:
        """Once as many tasks exist as a pass chooses routers and each router experts,
        every task adds an expert, a router and a perceptor per block and a classifier
        block, and its passes run one more expert (account)."""
        return min(n_tasks, max(params["routers"], params["experts"]))

    @classmethod
    def account_settings(cls, params: dict, n_tasks: int) -> dict:
        """Inference runs T + 1 passes up to task ``iter_pred_max_task`` (0-based) and the
        routed pass alone after it; ``iter_pred`` changes nothing else, so a stream that
        ends beyond that task counts as one without it (account)."""
        if params["iter_pred"] and n_tasks > params["iter_pred_max_task"] + 1:
            return {"iter_pred": False}
        return {}

    def build_optimizer(self, model: CareNet):
        """One SGD over the trainable adapter weights and every classifier block (official
        get_optimizer); a later task's first stage ends its cosine at ``lr / 2``."""
        p = self.params
        if model.task > 0:
            p = dict(p, epochs=stage_epochs(p), eta_min=p["lr"] / 2)
        return make_optimizer(p, model.parameters())

    def model_adaptation(self, model=None):
        """The task's modules (:meth:`CareNet.begin_task`), its epochs (two stages after
        the first task) and the snapshot of the shared adapters."""
        model = super().model_adaptation(model)
        if self.is_training:
            self.epochs_done = 0
            self.train_epochs = self.params["epochs"]
            if model.task > 0:
                self.train_epochs = 2 * stage_epochs(self.params)
                model.moe.snapshot_shared()
        return model

    def criterion(self) -> torch.Tensor:
        p, out = self.params, self.mb_output
        if not self.is_training:
            return self._criterion(out, self.mb_y)
        current = self.model.cached("current", out.device)
        y = torch.searchsorted(current, self.mb_y)
        return cosface(self.model.teacher, y, p["scale"], p["margin"]) + perceptor_loss(
            self.model.latents, self.model.teacher, y, p
        )

    def routing(self) -> torch.Tensor | None:
        """The lowest-entropy forced pass per image (None with one pass)."""
        return self.model.route

    def _after_training_epoch(self, **kwargs) -> None:
        super()._after_training_epoch(**kwargs)
        self.epochs_done += 1
        if self.model.task > 0 and self.epochs_done == stage_epochs(self.params):
            self.between_stages()

    def between_stages(self) -> None:
        """Class statistics and alignment, then a fresh optimizer from the rate the first
        stage ended at, cosine to 0, and a new snapshot of the shared adapters."""
        model, p = self.model, self.params
        lr = self.optimizer.param_groups[0]["lr"]
        model.eval()
        model.set_statistics(self.experience.dataset.eval(), self.device, self.precision)
        align_classifier(model, p)
        model.train()
        self.optimizer, self.scheduler = make_optimizer(
            dict(p, lr=lr, epochs=stage_epochs(p)), model.parameters()
        )
        self.optimized_param_id = {}
        model.moe.snapshot_shared()

    def _after_training_exp(self, **kwargs) -> None:
        self.model.eval()
        self.model.set_statistics(self.experience.dataset.eval(), self.device, self.precision)
        if self.model.task > 0:
            align_classifier(self.model, self.params)
        super()._after_training_exp(**kwargs)
