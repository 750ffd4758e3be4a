"""TUNA: the elected universal adapter, the entropy selection and the combined
prediction on constructed tensors, the orthogonality loss and the alignment's mean
decay by hand, the output formula on a model, the parameter counts at ViT-B width, a
small end-to-end run (random ViT-Tiny at 32 px) that learns and resumes to the same
numbers, and the accounting. Every run here is fp32."""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from cl_bench.backbones.adapters import AdapterSet
from cl_bench.strategies.blocks.cosine_alignment import combine, decay_factors, entropy
from cl_bench.strategies.tuna import elect, orthogonality
from tests.helpers.cli import invoke
from tests.helpers.strategies import run_stream, strategy, vit_backbone

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

SET_768 = 12 * (2 * 768 * 16 + 16 + 768)  # one adapter set at ViT-B, ffn 16
SET_192 = 12 * (2 * 192 * 16 + 16 + 192)  # at ViT-Tiny


def filled(values: list[float]) -> AdapterSet:
    """A set of 2 blocks, width 2, dim 2 whose every parameter holds ``values``
    cyclically (so several entries differ)."""
    s = AdapterSet(2, 2, [0, 1])
    with torch.no_grad():
        for p in s.parameters():
            flat = torch.tensor(values * p.numel())[: p.numel()]
            p.copy_(flat.view_as(p))
    return s


def test_elect_by_hand():
    a = filled([1.0, -2.0, 0.5, 0.0])
    b = filled([3.0, 1.0, -0.5, 0.0])
    c = filled([-1.0, -1.0, -2.0, 0.0])
    u = elect([a, b, c])
    # entry 0: mean 1 > 0, positive values 1, 3 -> 3; entry 1: mean -2/3, negatives
    # -2, -1 -> -2; entry 2: mean -2/3, negatives -0.5, -2 -> -2; entry 3: all 0 -> 0
    for p in u.parameters():
        expected = torch.tensor([3.0, -2.0, -2.0, 0.0] * p.numel())[: p.numel()].view_as(p)
        assert torch.equal(p, expected)
        assert not p.requires_grad
    # one set elects itself, exactly
    for p, q in zip(elect([a]).parameters(), a.parameters(), strict=True):
        assert torch.equal(p, q)


def test_entropy_selection_and_combination():
    uniform = torch.zeros(3)
    sharp = torch.tensor([10.0, 0.0, 0.0])
    assert_close(entropy(uniform), torch.tensor(math.log(3)))
    p = sharp.softmax(0)
    assert_close(entropy(sharp), -(p * torch.log(p + 1e-10)).sum())
    # 2 task sets, 2 images: image 0 sharpest under set 1, image 1 under set 0
    task = torch.stack(
        [
            torch.stack([uniform, torch.tensor([0.0, 0.0, 8.0])]),
            torch.stack([torch.tensor([0.0, 6.0, 0.0]), uniform]),
        ]
    )
    universal = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    out, choice = combine(task, universal)
    assert choice.tolist() == [1, 0]
    expected = torch.stack(
        [
            task[1, 0].softmax(0) + universal[0].softmax(0),
            task[0, 1].softmax(0) + universal[1].softmax(0),
        ]
    )
    assert_close(out, expected)
    assert out.argmax(1).tolist() == [1, 2]


def test_orthogonality_by_hand():
    cur, old = AdapterSet(2, 2, [0, 1]), AdapterSet(2, 2, [0, 1])
    with torch.no_grad():
        for block, (u, v) in enumerate(
            (
                ([[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]),
                ([[3.0, 4.0], [0.0, 2.0]], [[0.0, -1.0], [0.0, -1.0]]),
            )
        ):
            cur[block].up.weight.copy_(torch.tensor(u))
            old[block].up.weight.copy_(torch.tensor(v))
    # block 0: rows e1, e2 against e1, e1: entries [[1, 1], [0, 0]], mean 1/2
    # block 1: rows (.6, .8), (0, 1) against -e2, -e2: [[-.8, -.8], [-1, -1]], mean -.9
    assert_close(orthogonality(cur, [old]), torch.tensor((0.5 + 0.9) / 2))
    assert_close(orthogonality(cur, [old, old]), torch.tensor(0.5 + 0.9))
    assert orthogonality(cur, []).item() == 0.0


def test_decay_factors():
    tasks = torch.tensor([0, 0, 1, 1, 2, 2])  # 3 tasks of 2 classes, at task 2
    assert_close(
        decay_factors(tasks, 2, official=False),
        0.9 + torch.tensor([1, 1, 2, 2, 3, 3]).double() / 3 * 0.1,
    )
    # official: class_idx // (-2) = 0, -1, -1, -2, -2, -3
    assert_close(
        decay_factors(tasks, 2, official=True),
        0.9 + torch.tensor([1, 0, 0, -1, -1, -2]).double() / 3 * 0.1,
    )


@pytest.fixture(scope="module")
def tiny():
    return vit_backbone("vit_tiny_patch16_224", 192)


def randomise(net, seed: int) -> torch.Generator:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in [*net.sets.parameters(), *net.head.parameters()]:
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return g


def test_eval_output_follows_the_formula(tiny):
    s = strategy("tuna", tiny, 6)
    net = s.model
    net.begin_task(0, [1, 3])
    net.begin_task(1, [0, 2, 4])
    g = randomise(net, 2)
    net.merge()
    net.eval()
    x = torch.rand(3, 3, 32, 32, generator=g)
    out = net(x)
    w = torch.cat([net.head[0], net.head[1]])  # columns: classes 1, 3, 0, 2, 4

    def logits(adapters):
        f = net.cls(net.normalize(x), adapters)
        return 20 * F.normalize(f, dim=-1) @ F.normalize(w, dim=-1).T

    task = torch.stack([logits(net.sets[0]), logits(net.sets[1])])
    expected, choice = combine(task, logits(elect([net.sets[0], net.sets[1]]).eval()))
    assert_close(out[:, [1, 3, 0, 2, 4]], expected, rtol=1e-4, atol=1e-5)
    assert torch.isinf(out[:, 5]).all()  # never seen
    assert torch.equal(s.routing(), choice)
    # universal: last runs the newest task set in its place
    net.params = dict(net.params, universal="last")
    net.universal = None
    assert_close(net(x)[:, [1, 3, 0, 2, 4]], combine(task, task[1])[0], rtol=1e-4, atol=1e-5)


def test_training_output_and_margin(tiny):
    s = strategy("tuna", tiny, 4, margin=0.3)
    net = s.model
    net.begin_task(0, [0, 1])
    net.begin_task(1, [2, 3])
    randomise(net, 3)
    net.train()
    net.params = dict(net.params, dropout=0.0)
    for a in net.sets[1].adapters.values():
        a.dropout = 0.0
    x = torch.rand(2, 3, 32, 32)
    out = net(x)
    f = net.cls(net.normalize(x), net.sets[1])
    cos = F.normalize(f, dim=-1) @ F.normalize(net.head[1], dim=-1).T
    assert_close(out[:, 2:], 20 * cos, rtol=1e-4, atol=1e-5)
    assert torch.isinf(out[:, :2]).all()
    s.mb_output, s.is_training = out, True
    s.mbatch = [x, torch.tensor([2, 3]), torch.zeros(2)]
    expected = F.cross_entropy(20 * (cos - 0.3 * torch.eye(2)), torch.tensor([0, 1]))
    orth = orthogonality(net.sets[1], [net.sets[0]])
    assert_close(s.criterion(), expected + 0.001 * math.exp(-2) * orth, rtol=1e-4, atol=1e-6)


def test_parameters_at_vit_b_width():
    assert SET_768 == 304_320
    s = strategy("tuna", vit_backbone("vit_base_patch16_224", 768), 100)
    net = s.model
    assert sum(p.numel() for p in net.sets[0].parameters()) == SET_768
    net.begin_task(0, list(range(10)))
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert trainable == SET_768 + 10 * 768  # the set and the task's classifier block
    net.begin_task(1, list(range(10, 20)))
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == SET_768 + 20 * 768
    assert not any(p.requires_grad for p in net.sets[0].parameters())
    net.merge()
    assert sum(p.numel() for p in net.universal.parameters()) == SET_768
    # orth_old_grad: the earlier set's up-projections (12 x 768 x 16) learn too
    s = strategy("tuna", vit_backbone("vit_base_patch16_224", 768), 100, orth_old_grad=True)
    s.model.begin_task(0, list(range(10)))
    s.model.begin_task(1, list(range(10, 20)))
    trainable = sum(p.numel() for p in s.model.parameters() if p.requires_grad)
    assert trainable == SET_768 + 20 * 768 + 12 * 768 * 16


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tuna_run(tiny):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    out = run_stream("tuna", tiny, lr=0.05, ca_epochs=5)
    return (*out, before)


def test_end_to_end(tuna_run, tiny):
    s, recorder, _, before = tuna_run
    assert [len(row) for row in recorder.acc_matrix] == [1, 2, 3]
    net = s.model
    assert len(net.sets) == 3 and [len(w) for w in net.head] == [2, 1, 1]
    assert net.task_of_class.tolist() == [0, 0, 1, 2]
    assert net.means.shape == (4, 192) and net.covs.shape == (4, 192, 192)
    # per task: the newest set + the classifier blocks of the seen classes
    assert recorder.trainable == [SET_192 + 2 * 192, SET_192 + 3 * 192, SET_192 + 4 * 192]
    # stored: the task sets, the universal set, the classifier, a mean and a covariance
    per_class = 192 + 192 * 192
    assert recorder.stored == [
        (k + 1) * SET_192 + c * (192 + per_class) for k, c in ((1, 2), (2, 3), (3, 4))
    ]
    # it learns: chance is 25% on the 16 test images of the 4 classes
    assert recorder.acc_seen[-1] >= 75.0, recorder.acc_seen
    for name, value in tiny.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(not b._forward_hooks for b in tiny.model.blocks)


def test_resumes_to_the_same_numbers(tuna_run, tiny):
    s, recorder, saved, _ = tuna_run
    state = torch.load(io.BytesIO(saved[1]), weights_only=False)
    resumed, resumed_recorder, _ = run_stream("tuna", tiny, start=(1, state), lr=0.05, ca_epochs=5)
    assert resumed_recorder.acc_matrix == recorder.acc_matrix
    for name, value in s.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


def test_account_counts_the_universal_pass():
    r = invoke(
        "account",
        "--methods",
        "tuna",
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
    rows = [line.split() for line in r.output.splitlines() if line.startswith("tuna")]
    per_class = 192 + 192 * 192
    # trainable (most over the tasks: the newest set and all 6 classes), added task 1,
    # added later, stored@end
    assert rows[0][1:5] == [
        f"{SET_192 + 6 * 192:,}",
        f"{2 * SET_192 + 2 * (192 + per_class):,}",
        f"{SET_192 + 2 * (192 + per_class):,}",
        f"{4 * SET_192 + 6 * (192 + per_class):,}",
    ], r.output
    assert float(rows[0][6]) == pytest.approx(4.05, abs=0.02)  # 3 task passes + universal
