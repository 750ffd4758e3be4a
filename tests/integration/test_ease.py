"""EASE: prototype completion and subspace weights on constructed tensors, the
logit formula on a model, the parameter counts at ViT-B width, a small end-to-end
run (random ViT-Tiny at 32 px) that resumes to the same numbers, and the accounting."""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from cl_bench.strategies.ease import complete_prototypes, subspace_weights
from tests.helpers.cli import invoke
from tests.helpers.strategies import run_stream, strategy, vit_backbone

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

E = math.e


def test_completion_two_tasks_by_hand():
    # classes 0, 1 of task 0; 2, 3 of task 1; subspaces 0 (adapter 0) and 1 (adapter 1)
    p = torch.zeros(4, 2, 2)
    p[:, 0] = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 2.0]])
    p[2:, 1] = torch.tensor([[2.0, 0.0], [0.0, 4.0]])
    out = complete_prototypes(p, torch.tensor([0, 0, 1, 1]), offset=0)
    # cos(old 0, new 2) = 1, cos(old 0, new 3) = 0: softmax -> e/(e+1), 1/(e+1)
    assert_close(out[0, 1], torch.tensor([2 * E / (E + 1), 4 / (E + 1)]))
    assert_close(out[1, 1], torch.tensor([2 / (E + 1), 4 * E / (E + 1)]))
    assert torch.equal(out[:, 0], p[:, 0])  # real prototypes untouched
    assert torch.equal(out[2:], p[2:])


def test_completion_sources_are_the_later_tasks_classes_only():
    g = torch.Generator().manual_seed(0)
    tasks = torch.tensor([0, 1, 2, -1])  # one class per task, row 3 unseen
    p = torch.randn(4, 3, 5, generator=g)
    out = complete_prototypes(p, tasks, offset=0)

    def expected(c: int, own: int, k: int, src: list[int]) -> torch.Tensor:
        sim = F.cosine_similarity(p[c, own][None], p[src, own], dim=-1).softmax(0)
        return sim @ p[src, k]

    # class 0 (task 0) in subspace 1: sources = tasks >= 1; in subspace 2: task 2 only
    assert_close(out[0, 1], expected(0, 0, 1, [1, 2]))
    assert_close(out[0, 2], p[2, 2])  # one source: softmax weight 1
    assert_close(out[1, 2], p[2, 2])
    for c, k in ((0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)):
        assert torch.equal(out[c, k], p[c, k])
    assert torch.equal(out[3], p[3])


def test_completion_never_touches_the_pretrained_subspace():
    g = torch.Generator().manual_seed(1)
    tasks = torch.tensor([0, 0, 1, 1])
    p = torch.randn(4, 3, 4, generator=g)  # subspace 0 = pretrained, 1 and 2 = adapters
    out = complete_prototypes(p, tasks, offset=1)
    assert torch.equal(out[:, 0], p[:, 0]) and torch.equal(out[:, 1], p[:, 1])
    sim = F.normalize(p[:2, 1], dim=-1) @ F.normalize(p[2:, 1], dim=-1).T
    assert_close(out[:2, 2], sim.softmax(1) @ p[2:, 2])


def test_subspace_weights():
    tasks = torch.tensor([0, 0, 1, 2, -1])
    w = subspace_weights(tasks, 3, alpha=0.1, beta=0.0, offset=0)
    a = 0.1 / 2  # alpha divided by the newest task index
    assert_close(w, torch.tensor([[1, a, a], [1, a, a], [a, 1, a], [a, a, 1], [0, 0, 0]]))
    w = subspace_weights(tasks, 4, alpha=0.1, beta=1.0, offset=1)
    assert_close(w[0], torch.tensor([1.0, 1, a, a]))
    assert_close(w[3], torch.tensor([1.0, a, a, 1]))
    # one task: its own subspace only
    assert_close(subspace_weights(torch.tensor([0, 0]), 1, 0.1, 0.0, 0), torch.ones(2, 1))


@pytest.fixture(scope="module")
def tiny():
    return vit_backbone("vit_tiny_patch16_224", 192)


def test_eval_logits_follow_the_formula(tiny):
    s = strategy("ease", tiny, 6)
    net = s.model
    net.begin_task(0, [0, 1, 2])
    net.begin_task(1, [3, 4])
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in net.sets.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    net.protos = torch.randn(5, 2, 192, generator=g)
    net.eval()
    x = torch.rand(2, 3, 32, 32, generator=g)
    logits = net(x)
    feats = [net.cls(x, net.sets[k]) for k in range(2)]
    w = subspace_weights(net.task_of_class, 2, 0.1, 0.0, 0)
    for c in range(5):
        expected = sum(
            w[c, k] * F.cosine_similarity(feats[k], net.protos[c, k][None]) for k in range(2)
        )
        assert_close(logits[:, c], expected, rtol=1e-4, atol=1e-5)
    assert torch.isinf(logits[:, 5]).all()  # never seen


def test_parameters_at_vit_b_width():
    s = strategy("ease", vit_backbone("vit_base_patch16_224", 768), 100)
    assert sum(p.numel() for p in s.model.sets[0].parameters()) == 1_189_632
    s.model.begin_task(0, list(range(10)))
    trainable = sum(p.numel() for p in s.model.parameters() if p.requires_grad)
    assert trainable == 1_189_632 + 10 * 768 + 1  # adapters + proxy rows and sigma
    s.model.begin_task(1, list(range(10, 20)))
    assert sum(p.numel() for p in s.model.parameters() if p.requires_grad) == trainable
    assert len(s.model.sets) == 2
    assert not any(p.requires_grad for p in s.model.sets[0].parameters())


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def ease_run(tiny):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    out = run_stream("ease", tiny)
    return (*out, before)


def test_end_to_end(ease_run, tiny):
    s, recorder, _, before = ease_run
    assert [len(row) for row in recorder.acc_matrix] == [1, 2, 3]
    assert recorder.routing_acc == [None] * 3
    net = s.model
    assert len(net.sets) == 3 and net.proxy is None
    assert net.protos.shape == (4, 3, 192)
    assert net.task_of_class.tolist() == [0, 0, 1, 2]
    # per task: a set of 12 x (2 x 192 x 64 + 64 + 192) + the proxy (classes x 192 + 1)
    assert recorder.trainable == [297_984 + 2 * 192 + 1, 297_984 + 192 + 1, 297_984 + 192 + 1]
    # stored: the sets and C x T x 192 prototypes
    assert recorder.stored == [
        297_984 + 2 * 192,
        2 * 297_984 + 3 * 2 * 192,
        3 * 297_984 + 4 * 3 * 192,
    ]
    for name, value in tiny.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(not b._forward_hooks for b in tiny.model.blocks)


def test_resumes_to_the_same_numbers(ease_run, tiny):
    s, recorder, saved, _ = ease_run
    state = torch.load(io.BytesIO(saved[1]), weights_only=False)
    resumed, resumed_recorder, _ = run_stream("ease", tiny, start=(1, state))
    assert resumed_recorder.acc_matrix == recorder.acc_matrix
    for name, value in s.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


def test_account_counts_t_passes(tmp_path):
    r = invoke(
        "account",
        "--methods",
        "ease",
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
    rows = [line.split() for line in r.output.splitlines() if line.startswith("ease")]
    # trainable, added task 1, added later, stored@end, GFLOPs, passes; trainable: the
    # adapter set and a 2-class proxy with its sigma (the placeholder task holds 2 classes)
    assert rows[0][1:5] == ["298,369", "298,368", "299,904", "897,408"]
    # three adapted passes; each adapter adds ~5% to a ViT-Tiny block at 5 tokens
    assert float(rows[0][6]) == 3.162
