"""SLDC: the symmetric cross-entropy, the distillation terms, the ridge operator with its
pull toward the identity and the Gaussian transport on constructed tensors; the
training and evaluation outputs and the loss on a model; the parameter counts at ViT-B
width; a small end-to-end run (random ViT-Tiny at 32 px) that learns and resumes to the
same numbers; the accounting. Every run here is fp32."""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from cl_bench.strategies.sldc import (
    distillation,
    drift_operator,
    symmetric_cross_entropy,
    transport,
    unified_batch,
)
from tests.helpers.cli import invoke
from tests.helpers.strategies import run_stream, strategy, vit_backbone

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

LORA_768 = 12 * 4 * (4 * 768 + 2 * (768 + 3072))  # one LoRA set at ViT-B, rank 4
LORA_192 = 12 * 4 * (4 * 192 + 2 * (192 + 768))  # at ViT-Tiny


def test_symmetric_cross_entropy_by_hand():
    logits = torch.tensor([[math.log(3.0), 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1])
    # p = (3/4, 1/4) and (1/2, 1/2); q = (1, 1e-4) and (1e-4, 1)
    ce = -((math.log(0.75) + 1e-4 * math.log(0.25)) + (1e-4 * math.log(0.5) + math.log(0.5))) / 2
    rce = -(0.25 * math.log(1e-4) + 0.5 * math.log(1e-4)) / 2
    assert_close(symmetric_cross_entropy(logits, y), torch.tensor(0.5 * ce + 0.5 * rce))
    assert_close(symmetric_cross_entropy(logits, y, 1.0, 0.0), torch.tensor(ce))
    # the 1e-7 floor: a probability of e^-40 counts as 1e-7
    sharp = torch.tensor([[0.0, 40.0]])
    assert_close(
        symmetric_cross_entropy(sharp, torch.tensor([0]), 1.0, 0.0),
        torch.tensor(-math.log(1e-7) - 1e-4 * math.log(1.0)),
    )


def test_distillation_by_hand():
    before = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
    after = torch.tensor([[0.0, 4.0], [0.0, 2.0]])
    # squared differences 9, 0, 0, 1: mean 2.5; norms 5 -> 4, 1 -> 2: mean of 1, 1 = 1
    assert_close(distillation(before, after, 1.0, 0.0), torch.tensor(2.5))
    assert_close(distillation(before, after, 0.0, 1.0), torch.tensor(1.0))
    assert_close(distillation(before, after, 1.0, 0.1), torch.tensor(2.6))


def test_drift_operator_is_the_ridge_solution_pulled_to_the_identity():
    before = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0]])
    rotate = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    after = before @ rotate * 5.0  # a rotation and a scale: the normalised map is R
    x, y = F.normalize(before, dim=1), F.normalize(after, dim=1)
    ridge = torch.linalg.solve(x.T @ x + 0.1 * torch.eye(2), x.T @ y)
    weight = math.exp(-3 / (1.0 * 2))
    expected = (1 - weight) * ridge + weight * torch.eye(2)
    assert_close(drift_operator(before, after, 0.1, 1.0), expected)
    # no ridge and no pull toward I (alpha_t -> 0): exactly R
    assert_close(drift_operator(before, after, 0.0, 1e-6), rotate, atol=1e-6, rtol=0)
    # alpha_t large (few samples against alpha_t d): the identity
    assert_close(drift_operator(before, after, 0.1, 1e9), torch.eye(2))


def test_transport_of_the_stored_gaussians():
    a = torch.tensor([[1.0, 2.0], [0.0, 1.0]])
    means = torch.tensor([[1.0, 1.0], [0.0, 2.0]])
    covs = torch.stack([torch.eye(2), torch.tensor([[2.0, 0.0], [0.0, 0.0]])])
    new_means, new_covs = transport(means, covs, a)
    assert_close(new_means, torch.tensor([[1.0, 3.0], [0.0, 2.0]]))  # mu^T A
    # A^T A = [[1, 2], [2, 5]]; A^T diag(2, 0) A = [[2, 4], [4, 8]]; + 0.01 I
    assert_close(new_covs[0], torch.tensor([[1.01, 2.0], [2.0, 5.01]]))
    assert_close(new_covs[1], torch.tensor([[2.01, 4.0], [4.0, 8.01]]))


def test_unified_batch():
    assert [unified_batch(c) for c in (1, 2, 10, 200)] == [3, 6, 32, 640]
    assert unified_batch(0) == 1


@pytest.fixture(scope="module")
def tiny():
    return vit_backbone("vit_tiny_patch16_224", 192)


def randomise(net, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.sets.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def test_outputs_and_loss_follow_the_formulas(tiny):
    s = strategy("sldc", tiny, 6)
    net = s.model
    net.begin_task(0, [1, 3])
    randomise(net, 1)
    net.begin_task(1, [0, 2, 4])  # the previous model: the set as it stands now
    randomise(net, 2)
    net.train()
    x = torch.rand(3, 3, 32, 32)
    out = net(x)
    f = net.feature(net.normalize(x), net.sets[0])
    f_prev = net.feature(net.normalize(x), net.previous)
    # final_norm plain: f has zero mean and unit variance per image
    assert_close(f.mean(1), torch.zeros(3), atol=1e-5, rtol=0)
    w = torch.cat([net.head[0], net.head[1]])  # columns: classes 1, 3, 0, 2, 4
    scale = torch.cat([net.head_scale[0], net.head_scale[1]])
    assert_close(out[:, [1, 3, 0, 2, 4]], (f @ w.T) * scale, rtol=1e-5, atol=1e-5)
    assert torch.isinf(out[:, 5]).all()  # never seen
    s.mb_output, s.is_training = out, True
    s.mbatch = [x, torch.tensor([0, 4, 2]), torch.zeros(3)]
    expected = symmetric_cross_entropy(out[:, [0, 2, 4]], torch.tensor([0, 2, 1])) + distillation(
        f_prev, f, 1.0, 0.1
    )
    assert_close(s.criterion(), expected, rtol=1e-5, atol=1e-6)
    # evaluation: the unified classifier over the seen classes
    net.unified_weight.data = torch.randn(5, 192)
    net.unified_scale.data = torch.rand(5)
    net.eval()
    out = net(x)
    expected = (f @ net.unified_weight.T) * net.unified_scale
    assert_close(out[:, [1, 3, 0, 2, 4]], expected, rtol=1e-5, atol=1e-5)


def test_statistics_are_compensated_then_extended(tiny):
    s = strategy("sldc", tiny, 4)
    net = s.model
    net.begin_task(0, [0, 1])
    g = torch.Generator().manual_seed(3)
    before, labels = torch.randn(8, 192, generator=g), torch.tensor([0, 1] * 4)
    net.update_statistics(before, before, labels)
    first_means, first_covs = net.means.clone(), net.covs.clone()
    assert_close(first_means[1], before[1::2].mean(0))
    assert_close(first_covs[0], torch.cov(before[0::2].T))  # no jitter stored
    net.begin_task(1, [2, 3])
    after = before @ torch.diag(torch.linspace(0.5, 2.0, 192)) + 0.1
    new_labels = torch.tensor([2, 3] * 4)
    net.update_statistics(before, after, new_labels)
    a = drift_operator(before, after, 1e-4, 1.0)
    means, covs = transport(first_means[:2], first_covs[:2], a)
    assert_close(net.means[:2], means)
    assert_close(net.covs[:2], covs)
    assert_close(net.means[2], after[0::2].mean(0))
    # compensation none keeps the old statistics as they were
    s = strategy("sldc", tiny, 4, compensation="none")
    s.model.begin_task(0, [0, 1])
    s.model.update_statistics(before, before, labels)
    s.model.begin_task(1, [2, 3])
    s.model.update_statistics(before, after, new_labels)
    assert torch.equal(s.model.means[:2], first_means[:2])


def test_parameters_at_vit_b_width():
    assert LORA_768 == 516_096
    s = strategy("sldc", vit_backbone("vit_base_patch16_224", 768), 100)
    net = s.model
    assert sum(p.numel() for p in net.sets.parameters()) == LORA_768
    net.begin_task(0, list(range(10)))
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert trainable == LORA_768 + 10 * 769  # the set, the task's rows and scales
    assert sum(p.numel() for p in net.previous.parameters()) == LORA_768
    assert not any(p.requires_grad for p in net.previous.parameters())
    net.begin_task(1, list(range(10, 20)))
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == LORA_768 + 20 * 769


# ---------------------------------------------------------------------- end to end

SHORT = {"lr": 0.001, "ca_samples": 64}


@pytest.fixture(scope="module")
def sldc_run(tiny):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    out = run_stream("sldc", tiny, **SHORT)
    return (*out, before)


def test_end_to_end(sldc_run, tiny):
    s, recorder, _, before = sldc_run
    assert [len(row) for row in recorder.acc_matrix] == [1, 2, 3]
    net = s.model
    assert [len(w) for w in net.head] == [2, 1, 1]
    assert net.task_of_class.tolist() == [0, 0, 1, 2]
    assert net.means.shape == (4, 192) and net.covs.shape == (4, 192, 192)
    assert net.unified_weight.shape == (4, 192) and net.previous is None
    # per task: the LoRA set, the head of the seen classes, the unified classifier of
    # the classes before the task
    assert recorder.trainable == [
        LORA_192 + 2 * 193,
        LORA_192 + 3 * 193 + 2 * 193,
        LORA_192 + 4 * 193 + 3 * 193,
    ]
    per_class = 2 * 193 + 192 + 192 * 192  # head, unified classifier, mean, covariance
    assert recorder.stored == [LORA_192 + c * per_class for c in (2, 3, 4)]
    # it learns: chance is 25% on the 16 test images of the 4 classes
    assert recorder.acc_seen[-1] >= 50.0, recorder.acc_seen
    for name, value in tiny.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(not m._forward_hooks for m in tiny.model.modules())
    assert "forward" not in vars(tiny.model.norm)


def test_resumes_to_the_same_numbers(sldc_run, tiny):
    s, recorder, saved, _ = sldc_run
    state = torch.load(io.BytesIO(saved[1]), weights_only=False)
    resumed, resumed_recorder, _ = run_stream("sldc", tiny, start=(1, state), **SHORT)
    assert resumed_recorder.acc_matrix == recorder.acc_matrix
    for name, value in s.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


def test_refuses_activation_checkpointing():
    r = invoke(
        "run",
        "--methods",
        "sldc",
        "--scenario",
        "synthetic",
        "--backbone",
        "vit_tiny_patch16_224",
        "--weights",
        "random",
        "--image-size",
        "32",
        "--set",
        "sldc.checkpoint_blocks=2",
        "--dry-run",
    )
    assert r.exit_code == 2, r.output
    assert "checkpoint_blocks" in r.output


def test_account_counts_one_pass():
    r = invoke(
        "account",
        "--methods",
        "sldc",
        "--backbone",
        "vit_tiny_patch16_224",
        "--tasks",
        "3",
        "--classes",
        "6",
        "--image-size",
        "32",
    )
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.output.splitlines() if line.startswith("sldc")]
    per_class = 2 * 193 + 192 + 192 * 192
    # trainable (most over the tasks: the set, 6 head rows, 4 unified rows), added task
    # 1, added later, stored@end
    assert rows[0][1:5] == [
        f"{LORA_192 + 10 * 193:,}",
        f"{LORA_192 + 2 * per_class:,}",
        f"{2 * per_class:,}",
        f"{LORA_192 + 6 * per_class:,}",
    ], r.output
    assert float(rows[0][6]) == pytest.approx(1.0, abs=0.05)  # one pass per test image
