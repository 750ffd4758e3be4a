"""MOS: the merging rule, the orthogonality loss and the self-refined retrieval on
constructed tensors, the alignment's Gaussian samples, the logit formula on a model,
the parameter counts at ViT-B width, a small end-to-end run (random ViT-Tiny at 32 px)
that resumes to the same numbers, and the accounting."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from cl_bench.backbones.adapters import AdapterSet
from cl_bench.strategies.blocks.gaussian_alignment import gaussian_factor, sample_features
from cl_bench.strategies.mos import merge_step, orthogonality_loss, self_refine
from tests.helpers.cli import invoke
from tests.helpers.strategies import run_stream, strategy, vit_backbone

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

SET_768 = 12 * (2 * 768 * 16 + 16 + 768)  # one adapter set at ViT-B, ffn 16
SET_192 = 12 * (2 * 192 * 16 + 16 + 192)  # at ViT-Tiny


def filled(value: float) -> AdapterSet:
    s = AdapterSet(4, 2, [0, 1])
    with torch.no_grad():
        for p in s.parameters():
            p.fill_(value)
    return s


def test_merge_step_moves_a_tenth_toward_the_anchor():
    current = filled(1.0)
    anchor = [torch.full_like(p, 3.0) for p in current.parameters()]  # mean of (2, 4)
    merge_step(current, anchor, 0.1)
    for p in current.parameters():
        assert_close(p, torch.full_like(p, 0.9 * 1 + 0.1 * 3))
    merge_step(current, anchor, 0.1)  # a second step: (1 - m)^2 of the start is left
    for p in current.parameters():
        assert_close(p, torch.full_like(p, 3 - 0.81 * 2))
    before = [p.clone() for p in current.parameters()]
    merge_step(current, anchor, 0.0)  # m = 0: untouched
    assert all(torch.equal(p, b) for p, b in zip(current.parameters(), before, strict=True))


def test_model_anchor_is_the_mean_of_the_earlier_sets(tiny):
    s = strategy("mos", tiny, 6)
    net = s.model
    net.begin_task(0, [0, 1])
    assert net.anchor == []
    with torch.no_grad():
        for p in net.sets[0].parameters():
            p.fill_(2.0)
    net.begin_task(1, [2, 3])
    with torch.no_grad():
        for p in net.sets[1].parameters():
            p.fill_(4.0)
    net.begin_task(2, [4, 5])
    assert [p.requires_grad for p in (next(net.sets[k].parameters()) for k in range(3))] == [
        False,
        False,
        True,
    ]
    # the new set starts as a copy of the last one; the anchor is mean(2, 4) = 3
    assert all(torch.equal(p, torch.full_like(p, 4.0)) for p in net.sets[2].parameters())
    assert all(torch.equal(a, torch.full_like(a, 3.0)) for a in net.anchor)
    net.merge_step()
    for p in net.sets[2].parameters():
        assert_close(p, torch.full_like(p, 0.9 * 4 + 0.1 * 3))
    assert all(torch.equal(p, torch.full_like(p, 2.0)) for p in net.sets[0].parameters())


def test_orthogonality_loss_by_hand():
    means = torch.tensor([[1.0, 0.0]])
    feats = torch.tensor([[0.0, 2.0]])
    # M = [[1, 0], [0, 2]]: M M^T / 0.5 = [[2, 0], [0, 8]]
    expected = (
        F.cross_entropy(torch.tensor([[2.0, 0.0]]), torch.tensor([0]))
        + F.cross_entropy(torch.tensor([[0.0, 8.0]]), torch.tensor([1]))
    ) / 2
    assert_close(orthogonality_loss(feats, means, 0.5), expected)
    # without old means, the batch alone
    assert_close(orthogonality_loss(feats, torch.zeros(0, 2), 0.5), torch.tensor(0.0))


def test_self_refine_on_constructed_logits():
    # 3 tasks, one class each (column j = task j); feats[b, k] carries the logits that
    # classifying adapter k's feature gives, as a one-hot position in the 3 dims
    task_of_column = torch.tensor([0, 1, 2])
    e = torch.eye(3)
    feats = torch.stack(
        [
            torch.stack([e[1], e[1], e[1]]),  # guess 0 -> predicts 1 -> 1 predicts 1: stays at 1
            torch.stack([e[0], e[2], e[1]]),  # guess 1 -> 2 -> 1 -> 2 -> stops after 4 at 2
            torch.stack([e[0], e[0], e[0]]),  # guess 0 predicts 0: done at once
        ]
    )
    logits, k = self_refine(feats, torch.tensor([0, 1, 0]), lambda f: f * 10, task_of_column, 4)
    assert k.tolist() == [1, 2, 0]
    assert_close(logits, torch.stack([e[1], e[1], e[0]]) * 10)
    # one classification only: the initial guess's adapter
    logits, k = self_refine(feats, torch.tensor([0, 1, 0]), lambda f: f, task_of_column, 1)
    assert k.tolist() == [0, 1, 0]
    assert_close(logits, torch.stack([e[1], e[2], e[0]]))
    # at most 2: sample 1 goes 1 -> 2 and stops there
    _, k = self_refine(feats, torch.tensor([0, 1, 0]), lambda f: f, task_of_column, 2)
    assert k.tolist() == [1, 2, 0]


def test_gaussian_samples_have_the_class_statistics():
    torch.manual_seed(0)
    a = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.5, 0.3]])
    covs = torch.stack([a @ a.T, torch.diag(torch.tensor([0.5, 2.0, 1.0]))])
    means = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    x, y = sample_features(means, gaussian_factor(covs), 40_000)
    assert x.shape == (80_000, 3) and y.tolist() == [0] * 40_000 + [1] * 40_000
    for c in range(2):
        assert_close(x[y == c].mean(0), means[c], atol=0.05, rtol=0)
        assert_close(torch.cov(x[y == c].T), covs[c], atol=0.08, rtol=0.02)
    # variances: a diagonal Gaussian
    x, y = sample_features(means, gaussian_factor(covs.diagonal(dim1=1, dim2=2)), 40_000)
    assert_close(x[y == 1].var(0), torch.tensor([0.5, 2.0, 1.0]), atol=0.05, rtol=0.03)


@pytest.fixture(scope="module")
def tiny():
    return vit_backbone("vit_tiny_patch16_224", 192)


def test_eval_logits_follow_the_formula(tiny):
    s = strategy("mos", tiny, 6)
    net = s.model
    net.begin_task(0, [0, 1, 2])
    net.begin_task(1, [3, 4])
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in [*net.sets.parameters(), *net.head.parameters()]:
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    net.protos = torch.randn(5, 192, generator=g)
    net.eval()
    x = torch.rand(3, 3, 32, 32, generator=g)
    out = net(x)
    feats = torch.stack([net.cls(net.normalize(x), net.sets[k]) for k in range(2)], 1)
    guess = F.normalize(feats[:, 0], dim=-1) @ F.normalize(net.protos, dim=-1).T
    task_of = torch.tensor([0, 0, 0, 1, 1])
    logits, k = self_refine(
        feats, task_of[guess.argmax(1)], lambda f: net.head(f)[:, :5], task_of, 4
    )
    assert_close(out[:, :5], logits.softmax(1) + (2 * guess).softmax(1), rtol=1e-4, atol=1e-5)
    assert torch.isinf(out[:, 5]).all()  # never seen
    assert torch.equal(s.routing(), k)


def test_parameters_at_vit_b_width():
    assert SET_768 == 304_320
    s = strategy("mos", vit_backbone("vit_base_patch16_224", 768), 100)
    assert sum(p.numel() for p in s.model.sets[0].parameters()) == SET_768
    s.model.begin_task(0, list(range(10)))
    trainable = sum(p.numel() for p in s.model.parameters() if p.requires_grad)
    assert trainable == SET_768 + 100 * 768 + 100  # the set and the head over all classes
    s.model.begin_task(1, list(range(10, 20)))
    assert sum(p.numel() for p in s.model.parameters() if p.requires_grad) == trainable
    assert len(s.model.sets) == 2
    assert not any(p.requires_grad for p in s.model.sets[0].parameters())


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def mos_run(tiny):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    out = run_stream("mos", tiny)
    return (*out, before)


def test_end_to_end(mos_run, tiny):
    s, recorder, _, before = mos_run
    assert [len(row) for row in recorder.acc_matrix] == [1, 2, 3]
    net = s.model
    assert len(net.sets) == 3
    assert net.task_of_class.tolist() == [0, 0, 1, 2]
    assert net.means.shape == (4, 192) and net.covs.shape == (4, 192, 192)
    # per task: the newest set + the head (4 x 192 + 4)
    head = 4 * 192 + 4
    assert recorder.trainable == [SET_192 + head] * 3
    # stored: the sets, the head, and per seen class a mean, a covariance and a prototype
    per_class = 192 + 192 * 192 + 192
    assert recorder.stored == [
        k * SET_192 + head + c * per_class for k, c in ((1, 2), (2, 3), (3, 4))
    ]
    # all 16 test images of the 4 classes (chance: 25%) right at the end, every one
    # retrieved through its own task's adapter set
    assert recorder.acc_seen[-1] == 100.0, recorder.acc_seen
    assert recorder.routing_acc[-1] == 100.0, recorder.routing_acc
    for name, value in tiny.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(not b._forward_hooks for b in tiny.model.blocks)


def test_resumes_to_the_same_numbers(mos_run, tiny):
    s, recorder, saved, _ = mos_run
    state = torch.load(io.BytesIO(saved[1]), weights_only=False)
    resumed, resumed_recorder, _ = run_stream("mos", tiny, start=(1, state))
    assert resumed_recorder.acc_matrix == recorder.acc_matrix
    for name, value in s.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


def test_account_counts_t_passes():
    r = invoke(
        "account",
        "--methods",
        "mos",
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
    rows = [line.split() for line in r.output.splitlines() if line.startswith("mos")]
    head, per_class = 6 * 192 + 6, 192 + 192 * 192 + 192
    # trainable, added task 1, added later, stored@end
    assert rows[0][1:5] == [
        f"{SET_192 + head:,}",
        f"{SET_192 + head + 2 * per_class:,}",
        f"{SET_192 + 2 * per_class:,}",
        f"{3 * SET_192 + head + 6 * per_class:,}",
    ]
    assert float(rows[0][6]) == 3.041  # three adapted passes (ffn 16 adds ~1.4% each)


@pytest.mark.parametrize(
    "cov", [torch.full((1, 2, 2), float("nan")), torch.tensor([[[1.0, 2.0], [2.0, 1.0]]])]
)  # not PD
def test_class_statistics_that_cannot_be_sampled_fail_the_run_as_diverged(cov):
    from cl_bench.errors import UserError

    with pytest.raises(UserError, match="the run diverged: the classifier alignment"):
        gaussian_factor(cov)
    assert torch.equal(gaussian_factor(torch.eye(2)[None] * 4), torch.eye(2)[None] * 2)
