"""Finetune, EWC and Joint on a random-weight ViT-Tiny at 32 px and a 4-class
synthetic stream (3 tasks: 2 + 1 + 1 classes), driven as ``runner.run_one``
drives a strategy."""

from __future__ import annotations

import pytest
import timm
import torch
from avalanche.core import SupervisedPlugin

from cl_bench.backbones.base import Backbone
from cl_bench.cards.catalogue import load_method
from cl_bench.contract import Bookkeeping, drive
from cl_bench.engine.environment import seed_everything
from cl_bench.engine.recording import Recorder
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.scenarios.loaders import synthetic
from cl_bench.scenarios.order import task_split
from cl_bench.scenarios.stream import Stream, build_stream
from cl_bench.scenarios.transforms import ToModelInput
from cl_bench.strategies.blocks.backbone_copy import FinetuneNet
from cl_bench.strategies.ewc import EWC
from cl_bench.strategies.finetune import Finetune
from cl_bench.strategies.joint import Joint

CPU = torch.device("cpu")
SIZE = 32


class Outputs(Bookkeeping, SupervisedPlugin):
    """Keeps the logits of the first training minibatch of every task and the
    predictions of every evaluation (test instrumentation, not state of the method)."""

    def __init__(self) -> None:
        super().__init__()
        self.train_logits: list[torch.Tensor] = []
        self.eval_pred: list[torch.Tensor] = []

    def after_forward(self, strategy, **kwargs) -> None:
        if strategy.clock.train_exp_iterations == 0:
            self.train_logits.append(strategy.mb_output.detach().clone())

    def before_eval_exp(self, strategy, **kwargs) -> None:
        self.eval_pred.append(torch.empty(0, dtype=torch.long))

    def after_eval_iteration(self, strategy, **kwargs) -> None:
        self.eval_pred[-1] = torch.cat([self.eval_pred[-1], strategy.mb_output.argmax(1)])


@pytest.fixture(scope="module")
def backbone() -> Backbone:
    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=SIZE
    )
    return Backbone(
        name="vit_tiny_patch16_224",
        model=model,
        dim=192,
        input_size=SIZE,
        kind="vit",
        weights="random",
        weights_digest="random",
    )


@pytest.fixture(scope="module")
def stream() -> Stream:
    data = synthetic(n_classes=4, train_per_class=8, test_per_class=4, size=SIZE)
    tf = ToModelInput(SIZE)
    return build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        [2, 0, 3, 1],
        task_split(4, 2, 1),
        test_shuffle=True,
        seed=1993,
        train_transform=tf,
        eval_transform=tf,
    )


def params(method: str, **overrides) -> dict:
    p = load_method(method).params
    p.update(epochs=1, batch_size=8, eval_batch_size=8, lr=0.01, **overrides)
    return p


def train(cls, p: dict, backbone: Backbone, stream: Stream, freeze: str | None = None):
    """``cls`` driven over ``stream`` as ``runner.run_one`` drives it; ``freeze``
    names a backbone submodule to freeze."""
    seed_everything(1993)
    recorder, outputs = Recorder(stream.task_of_label, backbone, progress=False), Outputs()
    strategy = cls(
        params=p,
        backbone=backbone,
        n_classes=4,
        device=CPU,
        plugins=[recorder, outputs],
        evaluator=quiet_evaluator(),
    )
    if freeze:
        strategy.model.backbone.get_submodule(freeze).requires_grad_(False)
    drive(strategy, stream)
    return strategy, recorder, outputs


@pytest.fixture(scope="module")
def runs(backbone, stream) -> dict:
    before = {k: v.clone() for k, v in backbone.model.state_dict().items()}
    out = {
        "finetune": train(Finetune, params("finetune"), backbone, stream),
        "ewc": train(EWC, params("ewc", ewc_lambda=100.0), backbone, stream, freeze="patch_embed"),
        "joint": train(Joint, params("joint"), backbone, stream),
    }
    out["backbone_before"] = before
    return out


# ------------------------------------------------------------------------------ all three


@pytest.mark.parametrize("method", ["finetune", "ewc", "joint"])
def test_accuracy_matrix_is_lower_triangular_in_percent(runs, method):
    _, recorder, _ = runs[method]
    assert [len(row) for row in recorder.acc_matrix] == [1, 2, 3]
    assert all(0.0 <= a <= 100.0 for row in recorder.acc_matrix for a in row)
    assert len(recorder.acc_seen) == 3


def test_shared_backbone_is_unchanged(runs, backbone):
    for name, value in backbone.model.state_dict().items():
        assert torch.equal(value, runs["backbone_before"][name]), name
    assert not any(p.requires_grad for p in backbone.model.parameters())
    for method in ("finetune", "ewc", "joint"):
        copy = runs[method][0].model.backbone
        assert all(
            a.data_ptr() != b.data_ptr()
            for a, b in zip(copy.parameters(), backbone.model.parameters(), strict=True)
        )
        moved = any(
            not torch.equal(a, b)
            for a, b in zip(copy.parameters(), backbone.model.parameters(), strict=True)
        )
        assert moved, f"{method} did not train its copy"


def test_private_copy_computes_the_shared_backbones_features(backbone, stream):
    net = FinetuneNet(backbone, 4).eval()
    x = torch.stack([stream.train[0].dataset[i][0] for i in range(4)])
    with torch.no_grad():
        torch.testing.assert_close(net.features(x), backbone.features(x))
    assert all(p.requires_grad for p in net.parameters())


def test_finetune_masks_unseen_classes_in_training(runs, stream):
    _, _, outputs = runs["finetune"]
    for t, logits in enumerate(outputs.train_logits):
        seen = [c for task in stream.tasks[: t + 1] for c in task]
        unseen = [c for c in range(4) if c not in seen]
        assert torch.isfinite(logits[:, seen]).all()
        assert torch.isneginf(logits[:, unseen]).all()


# ----------------------------------------------------------------------------------- EWC


def test_ewc_keeps_one_set_of_importances_for_trainable_parameters_only(runs):
    strategy, _, _ = runs["ewc"]
    plugin = strategy.ewc
    trainable = {n for n, p in strategy.model.named_parameters() if p.requires_grad}
    frozen = {n for n, p in strategy.model.named_parameters() if not p.requires_grad}
    assert frozen == {"backbone.patch_embed.proj.weight", "backbone.patch_embed.proj.bias"}
    assert list(plugin.importances) == [2] and list(plugin.saved_params) == [2]  # online
    assert set(plugin.importances[2]) == trainable == set(plugin.saved_params[2])
    n_trainable = sum(strategy.model.get_parameter(n).numel() for n in trainable)
    assert plugin.stored_bytes() == 2 * 4 * n_trainable


def test_stored_parameters_are_the_head_plus_ewc_state(runs):
    head = 192 * 4 + 4  # the fine-tuned backbone copy replaces the backbone
    assert runs["finetune"][1].stored == [head] * 3
    assert runs["joint"][1].stored == [head]
    strategy, recorder, _ = runs["ewc"]
    assert recorder.stored == [head + strategy.ewc.stored_bytes() // 4] * 3  # online: flat


def test_ewc_importances_are_bounded_by_importance_max(runs, stream):
    strategy, _, _ = runs["ewc"]
    plugin = strategy.ewc

    def largest(bound: float | None) -> float:
        plugin.importance_max = bound
        imp = plugin.compute_importances(
            strategy.model, strategy._criterion, strategy.optimizer, stream.train[0].dataset, CPU, 8
        )
        return max(float(v.data.max()) for v in imp.values())

    try:
        unbounded = largest(None)
        assert unbounded > 1e-4
        assert largest(1e-4) == pytest.approx(1e-4)
    finally:
        plugin.importance_max = strategy.params["importance_max"]


def test_ewc_penalty_is_zero_at_the_anchor_and_grows_as_a_parameter_moves(runs):
    strategy, _, _ = runs["ewc"]
    plugin, head = strategy.ewc, strategy.model.head.weight
    assert strategy.clock.train_exp_counter == 3

    def penalty() -> torch.Tensor:
        strategy.loss = torch.zeros(())
        plugin.before_backward(strategy)
        return strategy.loss

    assert penalty().item() == 0.0  # right after the last task: theta == theta*
    delta = 0.1
    with torch.no_grad():
        head.add_(delta)
    try:
        expected = plugin.ewc_lambda * (plugin.importances[2]["head.weight"].data * delta**2)
        assert penalty().item() > 0.0
        torch.testing.assert_close(penalty(), expected.sum(), rtol=1e-4, atol=0.0)
    finally:
        with torch.no_grad():
            head.sub_(delta)


# --------------------------------------------------------------------------------- Joint


def test_joint_trains_once_and_scores_step_i_over_the_first_i_tasks(runs, stream):
    _, recorder, outputs = runs["joint"]
    assert len(recorder.train_s) == 1 and len(recorder.trainable) == 1
    assert len(outputs.train_logits) == 1
    assert torch.isfinite(outputs.train_logits[0]).all()  # every class active in training
    assert len(outputs.eval_pred) == 3
    for i, pred in enumerate(outputs.eval_pred):
        allowed = {c for task in stream.tasks[: i + 1] for c in task}
        assert set(pred.tolist()) <= allowed, f"step {i} predicted {set(pred.tolist())}"
