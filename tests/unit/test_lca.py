"""LCA's equations on small constructed tensors: the TIES merge (trim, the vote of signs,
the disjoint mean), the local alignment loss (regions by nearest class mean, the
robustness term, the fallback), and the alignment's Gaussian samples. fp32, fixed seeds."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.testing import assert_close

from cl_bench.strategies.blocks.gaussian_alignment import gaussian_factor, sample_features
from cl_bench.strategies.blocks.local_alignment import (
    align_locally,
    in_own_region,
    local_alignment_loss,
)
from cl_bench.strategies.blocks.ties import disjoint_mean, ties_merge, trim


def test_trim_keeps_the_largest_magnitudes():
    tau = torch.tensor([[0.5, -3.0], [1.0, -0.2]])
    assert torch.equal(trim(tau, 50), torch.tensor([[0.0, -3.0], [1.0, 0.0]]))
    assert torch.equal(trim(tau, 100), tau)
    assert torch.equal(trim(tau, 1), torch.tensor([[0.0, -3.0], [0.0, 0.0]]))  # at least one
    tied = torch.tensor([2.0, -2.0, 1.0, 0.0])
    assert torch.equal(trim(tied, 25), torch.tensor([2.0, -2.0, 0.0, 0.0]))  # ties kept


def test_disjoint_mean_votes_signs_by_count():
    a = torch.tensor([1.0, 2.0, -1.0, 0.0, 3.0])
    b = torch.tensor([3.0, -4.0, 0.0, 0.0, 1.0])
    c = torch.tensor([-1.0, -1.0, -2.0, 0.0, 1.0])
    # entry 0: signs + + - -> +, mean of 1, 3 = 2 (the TIES paper's sum of values
    # would elect + too); entry 1: + - - -> -, mean of -4, -1; entry 2: - 0 - -> -,
    # mean of -1, -2; entry 3: all 0; entry 4: all + -> mean 5/3
    expected = torch.tensor([2.0, -2.5, -1.5, 0.0, 5 / 3])
    assert_close(disjoint_mean([a, b, c]), expected)
    # two vectors that disagree merge to 0: the vote is a tie (the paper's sum would
    # keep the larger one); one zero leaves the other
    assert_close(
        disjoint_mean([torch.tensor([2.0, 0.0]), torch.tensor([-5.0, 3.0])]),
        torch.tensor([0.0, 3.0]),
    )


def test_ties_merge_from_a_base():
    base = torch.tensor([1.0, 1.0, 1.0, 1.0])
    previous = torch.tensor([2.0, 0.0, 1.0, 4.0])  # tau: 1, -1, 0, 3
    trained = torch.tensor([3.0, 2.0, 0.5, 1.0])  # tau: 2, 1, -0.5, 0
    merged = ties_merge(base, [previous, trained], topk=100, coef=1.0)
    assert_close(merged, torch.tensor([2.5, 1.0, 0.5, 4.0]))
    assert_close(ties_merge(base, [previous, trained], coef=0.5), 1 + 0.5 * (merged - 1))
    # topk 50 trims each task vector to its 2 largest magnitudes first:
    # previous tau 1, -1, 0, 3 -> (tie at 1 kept) 1, -1, 0, 3; trained 2, 1, -.5, 0 -> 2, 1, 0, 0
    assert_close(ties_merge(base, [previous, trained], topk=50), torch.tensor([2.5, 1.0, 1.0, 4.0]))
    assert_close(ties_merge(base, [trained]), trained)  # one task: itself


def official_loss(logits, labels, feats, means, weight):
    """The loss written class by class, as the official ``align`` loops over the classes."""
    losses = F.cross_entropy(logits, labels, reduction="none")
    nearest = torch.cdist(feats, means).argmin(1)
    total = []
    for c in labels.unique():
        region = (labels == c) & (nearest == c)
        if not region.any():
            total.append(losses[labels == c].mean())
            continue
        inside = losses[region]
        term2 = torch.zeros(())
        if len(inside) >= 2:
            diffs = (inside[:, None] - inside[None, :]).abs()
            term2 = diffs[~torch.eye(len(inside), dtype=torch.bool)].mean()
        total.append(inside.mean() + weight * term2)
    return torch.stack(total).mean()


def test_local_alignment_loss_by_hand():
    means = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    # class 0: samples 0, 1 near mean 0, sample 2 near mean 1 (outside its region);
    # class 1: sample 3 near mean 2 only (no sample in its region: fallback)
    feats = torch.tensor([[1.0, 0.0], [0.0, 1.0], [9.0, 0.0], [0.0, 9.0]])
    labels = torch.tensor([0, 0, 0, 1])
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0], [1.0, 1.0, 0.0]])
    ce = F.cross_entropy(logits, labels, reduction="none")
    class0 = (ce[0] + ce[1]) / 2 + 0.1 * (ce[0] - ce[1]).abs()  # 2 ordered pairs, same value
    class1 = ce[3]
    expected = (class0 + class1) / 2
    assert_close(
        local_alignment_loss(logits, labels, in_own_region(feats, labels, means), 0.1), expected
    )
    assert_close(official_loss(logits, labels, feats, means, 0.1), expected)
    # no robustness weight: the mean region loss per class
    assert_close(
        local_alignment_loss(logits, labels, in_own_region(feats, labels, means), 0.0),
        ((ce[0] + ce[1]) / 2 + ce[3]) / 2,
    )


def test_local_alignment_loss_equals_the_class_loop_with_gradients():
    g = torch.Generator().manual_seed(0)
    means = torch.randn(5, 4, generator=g) * 2
    labels = torch.randint(0, 5, (64,), generator=g)
    feats = means[labels] + torch.randn(64, 4, generator=g)
    w = torch.randn(5, 4, generator=g, requires_grad=True)
    ours = local_alignment_loss(feats @ w.T, labels, in_own_region(feats, labels, means), 0.7)
    (grad_ours,) = torch.autograd.grad(ours, w)
    reference = official_loss(feats @ w.T, labels, feats, means, 0.7)
    (grad_ref,) = torch.autograd.grad(reference, w)
    assert_close(ours, reference)
    assert_close(grad_ours, grad_ref)


def test_samples_follow_mean_and_covariance():
    torch.manual_seed(0)
    means = torch.tensor([[1.0, -2.0], [5.0, 0.0]])
    covs = torch.tensor([[[2.0, 0.6], [0.6, 1.0]], [[0.5, -0.2], [-0.2, 0.3]]])
    x, y = sample_features(means, gaussian_factor(covs), 40_000)
    assert y.tolist()[:2] == [0, 0] and torch.equal(y.bincount(), torch.tensor([40_000, 40_000]))
    for c in range(2):
        drawn = x[y == c]
        assert_close(drawn.mean(0), means[c], atol=0.03, rtol=0)
        assert_close(torch.cov(drawn.T), covs[c], atol=0.03, rtol=0)
    # the factor: L L^T = covariance
    factor = gaussian_factor(covs)
    assert_close(factor @ factor.transpose(1, 2), covs)


def test_align_locally_draws_once_and_steps_per_batch():
    """Samples drawn once: the same (shuffled) set every epoch; one step per batch of
    ``batch_size``; the scheduler once per epoch."""
    torch.manual_seed(0)
    means = torch.tensor([[0.0, 0.0], [4.0, 4.0]])
    covs = torch.eye(2).expand(2, 2, 2) * 0.5
    head = torch.nn.Linear(2, 2, bias=False)
    seen: list[torch.Tensor] = []

    def logits(x):
        seen.append(x.detach().clone())
        return head(x)

    opt = torch.optim.SGD(head.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
    align_locally(means, covs, 10, 3, 8, 0.1, opt, sched, logits)
    assert [len(b) for b in seen] == [8, 8, 4] * 3
    epochs = [torch.cat(seen[i * 3 : i * 3 + 3]) for i in range(3)]
    first = sorted(map(tuple, epochs[0].tolist()))
    assert all(sorted(map(tuple, e.tolist())) == first for e in epochs[1:])
    assert not torch.equal(epochs[0], epochs[1])  # reshuffled
    assert sched.last_epoch == 3
    # it separates the two classes
    x = torch.tensor([[0.0, 0.0], [4.0, 4.0]])
    assert head(x).argmax(1).tolist() == [0, 1]
