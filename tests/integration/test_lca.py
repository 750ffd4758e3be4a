"""LCA on a model: the output formula, the merge of a task's set into the previous
merge, the parameter counts at ViT-B width, a small end-to-end run (random ViT-Tiny at
32 px) that learns and resumes to the same numbers in process, a run killed after a
task that resumes with the numbers of an uninterrupted one, and the accounting. Every
run here is fp32."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch.testing import assert_close

from cl_bench.strategies.blocks.ties import ties_merge
from tests.helpers.cli import invoke
from tests.helpers.processes import VIT_STREAM, assert_same_numbers, cl_bench, kill_and_resume
from tests.helpers.processes import records as read_records
from tests.helpers.strategies import run_stream, strategy, vit_backbone

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

SET_768 = 12 * (2 * 768 * 16 + 16 + 768)  # one adapter set at ViT-B, ffn 16
SET_192 = 12 * (2 * 192 * 16 + 16 + 192)  # at ViT-Tiny
PER_CLASS_192 = 192 + 192 + 192 * 192  # head row, mean, covariance


@pytest.fixture(scope="module")
def tiny():
    return vit_backbone("vit_tiny_patch16_224", 192)


def test_output_follows_the_formula(tiny):
    net = strategy("lca", tiny, 6).model
    net.begin_task(0, [1, 3])
    net.begin_task(1, [0, 2, 4])
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in [*net.sets.parameters(), *net.head.parameters()]:
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    x = torch.rand(3, 3, 32, 32, generator=g)
    net.eval()
    f = net.cls(net.normalize(x), net.sets[0])
    out = net(x)
    w = torch.cat([net.head[0], net.head[1]])  # columns: classes 1, 3, 0, 2, 4
    assert_close(out[:, [1, 3, 0, 2, 4]], f @ w.T)
    assert torch.isinf(out[:, 5]).all()  # never seen
    net.train()
    for a in net.sets[0].adapters.values():
        a.dropout = 0.0
    out = net(x)
    assert_close(out[:, [0, 2, 4]], f @ net.head[1].T)  # training: the newest head only
    assert torch.isinf(out[:, [1, 3, 5]]).all()


def test_merge_is_ties_of_the_previous_merge_and_the_trained_set(tiny):
    net = strategy("lca", tiny, 4).model
    net.begin_task(0, [0, 1])
    net.merge()  # task 0: nothing to merge
    with torch.no_grad():
        for p in net.sets[0].parameters():
            p.add_(torch.randn(p.shape))
    net.begin_task(1, [2, 3])
    previous = copy.deepcopy(net.sets[0])
    with torch.no_grad():
        for p in net.sets[0].parameters():
            p.add_(torch.randn(p.shape))
    trained = copy.deepcopy(net.sets[0])
    net.merge()
    for m, b, p, t in zip(
        net.sets[0].parameters(),
        net.base.parameters(),
        previous.parameters(),
        trained.parameters(),
        strict=True,
    ):
        assert torch.equal(m, ties_merge(b, [p, t]))
    assert net.merged == []


def test_parameters_at_vit_b_width():
    assert SET_768 == 304_320
    net = strategy("lca", vit_backbone("vit_base_patch16_224", 768), 100).model
    assert sum(p.numel() for p in net.sets[0].parameters()) == SET_768
    assert sum(p.numel() for p in net.base.parameters()) == SET_768
    assert not any(p.requires_grad for p in net.base.parameters())
    net.begin_task(0, list(range(10)))
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert trainable == SET_768 + 10 * 768  # the set and the task's head
    net.begin_task(1, list(range(10, 20)))
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == SET_768 + 10 * 768
    stored = sum(t.numel() for t in (*net.parameters(), *net.buffers()))
    assert stored == 2 * SET_768 + 20 * 768  # no statistics yet


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def lca_run(tiny):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    out = run_stream("lca", tiny, lr=0.05, ca_samples=64)
    return (*out, before)


def test_end_to_end(lca_run, tiny):
    s, recorder, _, before = lca_run
    assert [len(row) for row in recorder.acc_matrix] == [1, 2, 3]
    net = s.model
    assert len(net.sets) == 1 and [len(w) for w in net.head] == [2, 1, 1]
    assert net.task_of_class.tolist() == [0, 0, 1, 2]
    assert net.means.shape == (4, 192) and net.covs.shape == (4, 192, 192)
    # per task: the set and the new head
    assert recorder.trainable == [SET_192 + 2 * 192, SET_192 + 192, SET_192 + 192]
    # stored: the merged set, its base, a head row, a mean and a covariance per class
    assert recorder.stored == [2 * SET_192 + c * PER_CLASS_192 for c in (2, 3, 4)]
    assert not any(p.requires_grad for p in net.head)  # the alignment leaves them frozen
    # it learns: chance is 25% on the 16 test images of the 4 classes
    assert recorder.acc_seen[-1] >= 75.0, recorder.acc_seen
    for name, value in tiny.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(not b._forward_hooks for b in tiny.model.blocks)


def test_resumes_to_the_same_numbers(lca_run, tiny):
    s, recorder, saved, _ = lca_run
    state = torch.load(io.BytesIO(saved[1]), weights_only=False)
    resumed, resumed_recorder, _ = run_stream("lca", tiny, start=(1, state), lr=0.05, ca_samples=64)
    assert resumed_recorder.acc_matrix == recorder.acc_matrix
    for name, value in s.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


KILLED = [
    *VIT_STREAM,
    "--set",
    "lca.epochs=1",
    "--set",
    "lca.ca_samples=32",
    "--set",
    "lca.ca_epochs=2",
]


def test_killed_run_resumes_with_identical_numbers(tmp_path):
    """Killed after its second task (a merge and an alignment behind it), resumed in a
    fresh process: the numbers of an uninterrupted run."""
    reference = cl_bench(tmp_path / "reference", *KILLED, "--methods", "lca")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    final = kill_and_resume(tmp_path / "out", KILLED, ["lca"], kill_after=1, tasks=3)
    assert final["lca"]["timing"]["resumed_from_task"] == 2
    assert_same_numbers(final["lca"], read_records(tmp_path / "reference")["lca"])


def test_account_counts_one_pass():
    r = invoke(
        "account",
        "--methods",
        "lca",
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
    rows = [line.split() for line in r.output.splitlines() if line.startswith("lca")]
    # trainable (the set and a task's head), added task 1, added later, stored@end
    assert rows[0][1:5] == [
        f"{SET_192 + 2 * 192:,}",
        f"{2 * SET_192 + 2 * PER_CLASS_192:,}",
        f"{2 * PER_CLASS_192:,}",
        f"{2 * SET_192 + 6 * PER_CLASS_192:,}",
    ], r.output
    assert float(rows[0][6]) == pytest.approx(1.0, abs=0.05)  # passes per test image
