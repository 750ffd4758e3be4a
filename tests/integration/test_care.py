"""CaRE: the router choice by entropy, the top-k expert gating and the mixture on
constructed tensors, one block's routed output by hand, the expert initialisation, the
shared adapters' EMA, the angular-margin and perceptor losses by hand, the parameter
counts at ViT-B width, the output formula and the pass rule on a model, a small
end-to-end run (random ViT-Tiny at 32 px) that learns and resumes to the same numbers,
a killed run that resumes, and the accounting. Every run here is fp32."""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from cl_bench.strategies.blocks.cosine_alignment import combine
from cl_bench.strategies.blocks.routed_moe import (
    MoELayer,
    NormedAdapter,
    RoutedMoE,
    choose_routers,
    entropy,
    gate,
    mix,
)
from cl_bench.strategies.care import cosface, perceptor_loss
from tests.helpers.cli import invoke
from tests.helpers.processes import VIT_STREAM, assert_same_numbers, cl_bench, kill_and_resume
from tests.helpers.strategies import run_stream, strategy, vit_backbone

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread


def adapter_params(d: int, r: int) -> int:
    """LayerNorm, down, up (with biases) and the per-channel scale."""
    return 2 * d + (d * r + r) + (r * d + d) + d


EXPERT_768, SHARED_768 = adapter_params(768, 16), adapter_params(768, 64)


def test_adapter_sizes_at_vit_b():
    assert (EXPERT_768, SHARED_768) == (27_664, 101_440)
    assert sum(p.numel() for p in NormedAdapter(768, 16, 0.1).parameters()) == EXPERT_768


def test_a_fresh_adapter_adds_nothing_and_scales_per_channel():
    torch.manual_seed(0)
    a = NormedAdapter(4, 3, 0.0)
    h = torch.randn(2, 5, 4)
    assert torch.equal(a(h), torch.zeros(2, 5, 4))
    with torch.no_grad():
        a.scale.copy_(torch.tensor([1.0, 0.0, 2.0, -1.0]))
    z = F.relu(a.down(F.layer_norm(h, (4,), a.norm.weight, a.norm.bias)))
    assert_close(a(h), a.up(z) * torch.tensor([1.0, 0.0, 2.0, -1.0]))


def test_choose_routers_by_entropy():
    # 4 routers (tasks), 3 samples: entropies of the perceptors 0..3
    ent = torch.tensor([[0.5, 2.0, 0.1], [0.2, 1.0, 0.3], [0.9, 0.1, 0.2], [0.3, 3.0, 0.0]])
    # routed: the two lowest per sample
    chosen = choose_routers(ent, 2, None)
    assert [sorted(chosen[:, b].tolist()) for b in range(3)] == [[1, 3], [1, 2], [0, 3]]
    # forced for task 3: the lowest among 0..2, then router 3
    assert choose_routers(ent, 2, 3).tolist() == [[1, 2, 0], [3, 3, 3]]
    # forced for task 1: router 0 (the only earlier one) and router 1
    assert choose_routers(ent, 2, 1).tolist() == [[0, 0, 0], [1, 1, 1]]
    # one router: the current one alone, or the lowest
    assert choose_routers(ent, 1, 2).tolist() == [[2, 2, 2]]
    assert choose_routers(ent, 1, None).tolist() == [[1, 2, 3]]
    # more routers asked than there are: all of them
    assert sorted(choose_routers(ent[:2], 3, None)[:, 0].tolist()) == [0, 1]
    assert choose_routers(ent, 5, 2)[:, 0].tolist()[-1] == 2


def test_gate_keeps_the_top_experts():
    scores = torch.tensor([[[1.0, 2.0, 3.0, 4.0, -math.inf]]])  # one router, one sample
    kept = torch.tensor([-100.0, 2.0, 3.0, 4.0, -100.0])
    assert_close(gate(scores, 3)[0, 0], kept.softmax(0))
    # no more experts than gated: a plain softmax (-inf: weight 0)
    assert_close(gate(scores[..., :3], 3), scores[..., :3].softmax(-1))
    assert gate(scores, 5)[0, 0, 4] == 0.0


def test_mix_sums_over_routers_and_experts():
    w = torch.tensor([[[0.25, 0.75]], [[1.0, 0.0]]])  # 2 routers, 1 sample, 2 experts
    outs = torch.stack([torch.ones(1, 2, 3), 2 * torch.ones(1, 2, 3)])
    # router 0: 0.25 + 1.5; router 1: 1 -> 2.75 (summed, not averaged)
    assert_close(mix(w, outs), torch.full((1, 2, 3), 2.75))


def randomised(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return module


def test_one_block_by_hand():
    layer = MoELayer(4, 2, 3, 0.0)
    for n in (2, 1, 3, 2):  # 4 tasks with 2, 1, 3, 2 classes
        layer.add_task(n)
    randomised(layer, 1).eval()
    h = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(2))
    outs = torch.stack([layer.experts[j](h) for j in range(4)])
    cls = outs[:, :, 0]
    ent = torch.stack([entropy(layer.perceptors[j](cls[j])) for j in range(4)])
    scores = torch.full((4, 3, 4), -math.inf)
    for j in range(4):
        scores[j, :, : j + 1] = layer.routers[j](cls[j])

    def expected(routers_per_sample, n):
        rows = []
        for b, chosen in enumerate(routers_per_sample):
            total = torch.zeros(5, 4)
            for r in chosen:
                s = scores[r, b, :n].clone()
                if n > 3:  # top 3 of the router's scores
                    s[s < s.topk(3).values[-1]] = -100.0
                total += (s.softmax(0)[:, None, None] * outs[:n, b]).sum(0)
            rows.append(total)
        return torch.stack(rows) + layer.shared(h)

    # routed: the 2 lowest-entropy routers of all 4
    routed = [ent[:, b].argsort()[:2].tolist() for b in range(3)]
    assert_close(layer(h, None, 2, 3, []), expected(routed, 4))
    # forced for task 2: experts 0..2, the lowest-entropy router of 0, 1 and router 2
    latents: list[torch.Tensor] = []
    forced = [[int(ent[:2, b].argmin()), 2] for b in range(3)]
    assert_close(layer(h, 2, 2, 3, latents), expected(forced, 3))
    assert len(latents) == 1 and torch.equal(latents[0], layer.perceptors[2](cls[2]))
    # forced for task 0: expert 0 alone
    assert_close(layer(h, 0, 2, 3, []), outs[0] + layer.shared(h))


def test_new_experts_start_from_the_earlier_ones_but_the_newest():
    layer = MoELayer(4, 2, 3, 0.1)
    layer.add_task(2)
    layer.add_task(2)
    assert not torch.equal(layer.experts[0].down.weight, layer.experts[1].down.weight)
    for j, value in enumerate((1.0, 3.0)):
        with torch.no_grad():
            for p in layer.experts[j].parameters():
                p.fill_(value)
    layer.add_task(2)  # the mean of expert 0 alone
    assert all(torch.equal(p, torch.full_like(p, 1.0)) for p in layer.experts[2].parameters())
    with torch.no_grad():
        for p in layer.experts[2].parameters():
            p.fill_(8.0)
    layer.add_task(2)  # the mean of experts 0 and 1
    assert all(torch.equal(p, torch.full_like(p, 2.0)) for p in layer.experts[3].parameters())
    # only the newest task's modules and the shared adapter train
    trains = {".".join(n.split(".")[:2]) for n, p in layer.named_parameters() if p.requires_grad}
    assert trains == {
        "experts.3",
        "routers.3",
        "perceptors.3",
        "shared.down",
        "shared.up",
        "shared.scale",
        "shared.norm",
    }
    assert [r.out_features for r in layer.routers] == [1, 2, 3, 4]
    assert [p[1].out_features for p in layer.perceptors] == [2, 2, 2, 2]


def test_shared_adapters_pull_to_their_snapshot():
    moe = RoutedMoE(4, [0, 1], 2, 3, 0.1, 2, 3)
    with torch.no_grad():
        for p in moe.shared_parameters():
            p.fill_(1.0)
    moe.snapshot_shared()
    with torch.no_grad():
        for p in moe.shared_parameters():
            p.fill_(2.0)  # an optimizer step moved them
    moe.pull_shared(0.999)
    for p in moe.shared_parameters():
        assert_close(p, torch.full_like(p, 0.999 * 1 + 0.001 * 2))
    moe.pull_shared(0.999)  # the snapshot does not move: 1 + 0.001^2
    for p in moe.shared_parameters():
        assert_close(p, torch.full_like(p, 1 + 0.001**2))
    assert all(torch.equal(s, torch.ones_like(s)) for s in moe.snapshot)


def test_cosface_is_the_official_formula():
    cos = torch.tensor([[0.2, 0.9, -0.3], [0.5, 0.1, 0.4]])
    y = torch.tensor([1, 2])
    s, m = 20.0, 0.3
    num = s * (cos[torch.arange(2), y] - m)
    others = torch.stack([torch.cat([cos[i, :k], cos[i, k + 1 :]]) for i, k in enumerate(y)])
    official = -(num - torch.log(torch.exp(num) + torch.exp(s * others).sum(1))).mean()
    assert_close(cosface(cos, y, s, m), official)
    assert_close(cosface(cos, y, s, 0.0), F.cross_entropy(s * cos, y))


def test_perceptor_loss_by_hand():
    g = torch.Generator().manual_seed(0)
    latents = [torch.randn(2, 3, generator=g) for _ in range(8)]
    teacher = torch.rand(2, 3, generator=g) * 2 - 1
    y = torch.tensor([0, 2])
    p = {"scale": 20.0, "margin": 0.3, "perceptor_loss": "cosface", "perceptor_kl": True}
    terms = []
    for block, z in enumerate(latents):
        tau = 1.0 if block < 6 else 2.0
        t = (teacher / tau).softmax(1)
        kl = (t * (t.log() - (z / tau).log_softmax(1))).sum() / 2 * tau**2
        terms.append((cosface(z, y, 20.0, 0.3) + kl) / 2)
    assert_close(perceptor_loss(latents, teacher, y, p), sum(terms) / 8)
    p = dict(p, perceptor_loss="ce", perceptor_kl=False)  # the ImageNet-A config
    ce = sum(F.cross_entropy(z, y) for z in latents) / 8
    assert_close(perceptor_loss(latents, teacher, y, p), ce)


def test_parameters_at_vit_b_width():
    net = strategy("care", vit_backbone("vit_base_patch16_224", 768), 100).model
    shared = 12 * SHARED_768
    assert sum(p.numel() for p in net.parameters()) == shared
    net.begin_task(0, list(range(10)))
    task0 = 12 * (EXPERT_768 + 769 * 1 + 2 * 768 + 769 * 10)
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == task0 + shared + 7680
    net.begin_task(1, list(range(10, 30)))
    task1 = 12 * (EXPERT_768 + 769 * 2 + 2 * 768 + 769 * 20)
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert trainable == task1 + shared + 30 * 768  # every classifier block trains
    stored = sum(p.numel() for p in net.parameters())
    assert stored == task0 + task1 + shared + 30 * 768


@pytest.fixture(scope="module")
def tiny():
    return vit_backbone("vit_tiny_patch16_224", 192)


def two_tasks(tiny, **overrides):
    s = strategy("care", tiny, 6, **overrides)
    net = s.model
    net.begin_task(0, [1, 3])
    net.begin_task(1, [0, 2, 4])
    randomised(net, 2)
    with torch.no_grad():
        for p in net.moe.shared_parameters():
            p.mul_(0.2)
    return s, net


def test_eval_output_follows_the_formula(tiny):
    s, net = two_tasks(tiny)
    net.eval()
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    out = net(x)
    w = torch.cat([net.head[0], net.head[1]])  # columns: classes 1, 3, 0, 2, 4

    def logits(moe_pass):
        f = net.vit(net.normalize(x), adapters=moe_pass).cls
        return 20 * F.normalize(f, dim=-1) @ F.normalize(w, dim=-1).T

    forced = torch.stack([logits(net.moe.forced(0)), logits(net.moe.forced(1))])
    routed = logits(net.moe.routed())
    expected, choice = combine(forced, routed)
    assert_close(out[:, [1, 3, 0, 2, 4]], expected, rtol=1e-4, atol=1e-5)
    assert torch.isinf(out[:, 5]).all()  # never seen
    assert torch.equal(s.routing(), choice)
    # beyond iter_pred_max_task (or without iter_pred): the routed pass alone
    net.params = dict(net.params, iter_pred_max_task=0)
    assert_close(net(x)[:, [1, 3, 0, 2, 4]], routed, rtol=1e-4, atol=1e-5)
    assert s.routing() is None


def test_passes_per_image_follow_the_task_index(tiny):
    _, net = two_tasks(tiny)
    net.eval()
    calls = []
    embed = net.embed
    net.embed = lambda x, task: calls.append(task) or embed(x, task)
    net(torch.rand(1, 3, 32, 32))
    assert calls == [None, 0, 1]  # the routed pass, then one forced pass per task
    # the rule: T + 1 passes from the second task to task index 60, one pass otherwise
    for task, iterates in ((0, False), (1, True), (60, True), (61, False), (300, False)):
        net.task = task
        assert net.iterates() == iterates
    net.task = 1
    net.params = dict(net.params, iter_pred=False)
    assert not net.iterates()


def test_training_output_and_loss(tiny):
    s, net = two_tasks(tiny, margin=0.3, perceptor_loss="cosface", perceptor_kl=True)
    net.train()
    for m in net.modules():
        if hasattr(m, "dropout") and isinstance(m.dropout, float):
            m.dropout = 0.0
    net.moe.snapshot_shared()
    x = torch.rand(2, 3, 32, 32)
    out = net(x)
    moe_pass = net.moe.forced(1)
    f = net.vit(net.normalize(x), adapters=moe_pass).cls
    cos = F.normalize(f, dim=-1) @ F.normalize(net.head[1], dim=-1).T
    assert_close(out[:, [0, 2, 4]], 20 * cos, rtol=1e-4, atol=1e-5)
    assert torch.isinf(out[:, [1, 3, 5]]).all()
    assert len(net.latents) == 12 and net.latents[0].shape == (2, 3)
    s.mb_output, s.is_training = out, True
    s.mbatch = [x, torch.tensor([2, 4]), torch.zeros(2)]
    y = torch.tensor([1, 2])  # classes 2 and 4 within the task's 0, 2, 4
    expected = cosface(cos, y, 20.0, 0.3) + perceptor_loss(moe_pass.latents, cos, y, s.params)
    assert_close(s.criterion(), expected, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- end to end

SETTINGS = {"lr": 0.05, "ca_epochs": 5}


@pytest.fixture(scope="module")
def care_run(tiny):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    out = run_stream("care", tiny, **SETTINGS)
    return (*out, before)


def test_end_to_end(care_run, tiny):
    s, recorder, _, before = care_run
    assert [len(row) for row in recorder.acc_matrix] == [1, 2, 3]
    net = s.model
    assert net.moe.n_tasks == 3 and [len(w) for w in net.head] == [2, 1, 1]
    assert net.task_of_class.tolist() == [0, 0, 1, 2]
    assert net.means.shape == (4, 192) and net.covs.shape == (4, 192)  # variances
    expert, shared = adapter_params(192, 16), 12 * adapter_params(192, 64)

    def task(t: int, classes: int) -> int:  # expert, router, perceptor on 12 blocks
        return 12 * (expert + 193 * (t + 1) + 2 * 192 + 193 * classes)

    assert recorder.trainable == [
        task(0, 2) + shared + 2 * 192,
        task(1, 1) + shared + 3 * 192,
        task(2, 1) + shared + 4 * 192,
    ]
    tasks = [task(0, 2), task(1, 1), task(2, 1)]
    assert recorder.stored == [
        sum(tasks[: k + 1]) + shared + c * (192 + 192 + 192) for k, c in ((0, 2), (1, 3), (2, 4))
    ]
    # it learns: chance is 25% on the 16 test images of the 4 classes
    assert recorder.acc_seen[-1] >= 75.0, recorder.acc_seen
    for name, value in tiny.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(not b._forward_hooks for b in tiny.model.blocks)


def test_resumes_to_the_same_numbers(care_run, tiny):
    s, recorder, saved, _ = care_run
    state = torch.load(io.BytesIO(saved[1]), weights_only=False)
    resumed, resumed_recorder, _ = run_stream("care", tiny, start=(1, state), **SETTINGS)
    assert resumed_recorder.acc_matrix == recorder.acc_matrix
    for name, value in s.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


def test_killed_run_resumes_with_identical_numbers(tmp_path):
    args = [*VIT_STREAM, "--set", "care.epochs=2", "--set", "care.ca_epochs=2"]
    reference = cl_bench(tmp_path / "reference", *args, "--methods", "care")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    final = kill_and_resume(tmp_path / "out", args, ["care"], kill_after=1, tasks=3)
    assert final["care"]["timing"]["resumed_from_task"] == 2
    from tests.helpers.processes import records

    assert_same_numbers(final["care"], records(tmp_path / "reference")["care"])


def test_account_counts_t_plus_one_passes():
    r = invoke(
        "account",
        "--methods",
        "care",
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
    rows = [line.split() for line in r.output.splitlines() if line.startswith("care")]
    # 4 passes after 3 tasks (3 forced, 1 routed), each a little more than a plain pass
    assert 4.0 < float(rows[0][6]) < 4.6, r.output
