"""MiN: the noise of one block, the mixing weights and the recursive least squares on
constructed tensors, the whole noised backbone against a hand-written pass, the
training and test logits on a model, the parameter counts at ViT-B width, a small
end-to-end run (random ViT-Tiny at 32 px) that learns and resumes to the same numbers,
and the accounting. Every run here is fp32."""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch.testing import assert_close

from cl_bench.accounting.count import backbone_flops
from cl_bench.strategies.blocks.analytic import RecursiveRidge
from cl_bench.strategies.blocks.noise import NoiseLayer, TaskNoise, mixing_weights
from tests.helpers.cards import card_variant
from tests.helpers.cli import invoke
from tests.helpers.paths import REPO
from tests.helpers.strategies import run_stream, strategy, vit_backbone

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

NOISE_768 = 12 * 2 * (192 * 192 + 192)  # one task's mu, sigma in 12 blocks, h = 192
LAYERS_768 = 12 * (768 * 768 + 768)  # the M_l
FIXED_768 = 12 * 2 * 768 * 192  # the A_l, B_l
NORMS_768 = 25 * 2 * 768  # 12 x (norm1, norm2) and the final norm
NOISE_192 = 12 * 2 * (192 * 192 + 192)  # at ViT-Tiny (h = 192 too)
LAYERS_192 = 12 * (192 * 192 + 192)
FIXED_192 = 12 * 2 * 192 * 192
NORMS_192 = 25 * 2 * 192


def set_linear(layer: torch.nn.Linear, weight: list, bias: list) -> None:
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight))
        layer.bias.copy_(torch.tensor(bias))


def test_noise_layer_by_hand():
    layer = NoiseLayer(2, 2)
    a, b = TaskNoise(2), TaskNoise(2)
    with torch.no_grad():
        layer.down.copy_(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
        layer.up.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
    set_linear(layer.mlp, [[0.0, 1.0], [0.0, 0.0]], [0.0, 1.0])
    set_linear(a.mu, [[1.0, 0.0], [0.0, 1.0]], [0.0, 0.0])
    set_linear(a.sigma, [[0.0, 0.0], [0.0, 0.0]], [1.0, 0.0])
    set_linear(b.mu, [[0.0, 1.0], [1.0, 0.0]], [0.0, 0.0])
    set_linear(b.sigma, [[2.0, 0.0], [0.0, 2.0]], [0.0, 0.0])
    y = torch.tensor([[[1.0, 2.0]]])
    # z = y A = (3, 2); a: (3, 2) + (1, 0) = (4, 2); b: (2, 3) + (6, 4) = (8, 7)
    # mixed = .25 (4, 2) + .5 (8, 7) = (5, 4); mixed B = (5, -4); M(y) = (2, 1)
    out = layer(y, [a, b], torch.tensor([0.25, 0.5]))
    assert out.tolist() == [[[2.0 + 5.0 + 1.0, 1.0 - 4.0 + 2.0]]]
    # zero mixing weights: only M(y) + y
    assert layer(y, [a, b], torch.zeros(2)).tolist() == [[[3.0, 3.0]]]


def test_fresh_noise_is_zero_and_the_fixed_draws_are_bounded():
    layer = NoiseLayer(8, 4)
    y = torch.randn(2, 3, 8)
    assert torch.equal(layer(y, [TaskNoise(4)], torch.ones(1)), y)
    assert layer.down.abs().max() <= 1 / math.sqrt(4) and layer.up.abs().max() <= 1 / math.sqrt(8)
    assert not any(p.abs().sum() for p in TaskNoise(4).parameters())


def test_mixing_weights():
    assert torch.equal(mixing_weights(torch.zeros(0, 2), 1), torch.zeros(1))
    assert torch.equal(mixing_weights(torch.ones(1, 2), 2), torch.zeros(2))
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # newest (1, 1) against (1, 0), (0, 1), itself; the new task's entry is 1
    c = 1 / math.sqrt(2)
    assert_close(mixing_weights(p, 4), torch.softmax(torch.tensor([c, c, 1.0, 1.0]), 0))
    w = mixing_weights(torch.tensor([[2.0, 0.0], [-3.0, 0.0]]), 3)
    e = math.exp(1)
    assert_close(w, torch.tensor([math.exp(-1), e, e]) / (math.exp(-1) + 2 * e))


def test_recursive_least_squares_is_the_ridge_solution():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(23, 6, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 3, (23,), generator=g)
    labels[:10] = labels[:10] % 2  # the first 10 rows see 2 classes only
    rls = RecursiveRidge(6, gamma=0.5)
    rls.grow(2)
    for chunk in (slice(0, 4), slice(4, 10)):
        rls.update(x[chunk], F.one_hot(labels[chunk], 2))
    rls.grow(3)
    for chunk in (slice(10, 11), slice(11, 23)):
        rls.update(x[chunk], F.one_hot(labels[chunk], 3))
    y = F.one_hot(labels, 3).double()
    expected = torch.linalg.solve(x.T @ x + 0.5 * torch.eye(6, dtype=torch.float64), x.T @ y)
    assert_close(rls.W, expected, rtol=1e-10, atol=1e-12)
    assert_close(
        rls.R,
        torch.linalg.inv(x.T @ x + 0.5 * torch.eye(6, dtype=torch.float64)),
        rtol=1e-10,
        atol=1e-12,
    )
    assert_close(rls(x[:2].float()), x[:2] @ expected)


@pytest.fixture(scope="module")
def tiny():
    return vit_backbone("vit_tiny_patch16_224", 192)


def randomise(modules, seed: int) -> torch.Generator:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in modules:
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return g


def by_hand(net, x: torch.Tensor) -> torch.Tensor:
    """f(x) written out with timm's modules: each block with the method's norms, then
    the noise layer, then the method's final norm; the [CLS] token."""
    vit, norms = net.vit.vit, net.norms
    h = vit.norm_pre(vit._pos_embed(vit.patch_embed(net.normalize(x))))
    for i, block in enumerate(vit.blocks):
        h = h + block.ls1(block.attn(norms[2 * i](h)))
        h = h + block.ls2(block.mlp(norms[2 * i + 1](h)))
        h = net.layers[i](h, [s[i] for s in net.sets], net.mix)
    return norms[-1](h)[:, 0]


def test_noised_backbone_follows_the_formula(tiny):
    s = strategy("min", tiny, 6, buffer_size=32)
    net = s.model
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    net.begin_task(0, [1, 3])
    net.add_noise()
    # fresh: zero noise, zero M_l, the norms' copies: timm's own output, bit for bit
    assert torch.equal(net.embed(net.normalize(x)), tiny.features(x))
    net.end_task(torch.ones(192))
    net.begin_task(1, [0, 2])
    net.add_noise()
    net.mix = torch.tensor([0.3, 0.7])
    randomise([net.sets, net.layers, net.norms], 2)
    assert_close(net.embed(net.normalize(x)), by_hand(net, x), rtol=1e-5, atol=1e-5)
    # nothing of the shared backbone changed or stayed hooked
    for name, value in tiny.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(not b._forward_hooks for b in tiny.model.blocks)
    assert all("forward" not in vars(n) for b in tiny.model.blocks for n in (b.norm1, b.norm2))
    assert "forward" not in vars(tiny.model.norm)


def test_training_and_test_logits(tiny):
    s = strategy("min", tiny, 6, buffer_size=32)
    net = s.model
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    net.begin_task(0, [3, 1])
    net.add_noise()
    assert net.head.bias is not None and net.head.weight.shape == (2, 32)
    randomise([net.head, net.layers], 4)
    net.train()
    phi = net.project(net.embed(net.normalize(x)))
    assert phi.dtype == torch.float64 and (phi >= 0).all()
    out = net(x)
    assert_close(out[:, [1, 3]], net.head(phi.float()))  # classifier order: 1, 3
    assert torch.isinf(out[:, [0, 2, 4, 5]]).all()
    net.end_task(torch.ones(192))
    net.begin_task(1, [0, 4, 2])
    g = torch.Generator().manual_seed(5)
    net.analytic.W = torch.randn(32, 5, generator=g, dtype=torch.float64)
    net.add_noise()
    assert net.head.bias is None and net.head.weight.shape == (5, 32)
    assert not net.head.weight.abs().sum()  # a fresh zero head
    randomise([net.head], 6)
    out = net(x)
    order = [1, 3, 0, 2, 4]
    analytic = phi @ net.analytic.W  # the noise of task 1 is zero: phi is unchanged
    assert_close(out[:, order], (net.head(phi.float()).double() + analytic).float())
    # the analytic term passes no gradient back: with a zero head, none reaches the noise
    net.mix = torch.tensor([0.5, 0.5])
    randomise([net.sets[1]], 7)
    with torch.no_grad():
        net.head.weight.zero_()
    net(x).sum().backward()
    assert all(not p.grad.abs().sum() for p in net.sets[1].parameters())
    net.mix = torch.zeros(2)
    net.eval()
    assert_close(net(x)[:, order], analytic.float())
    assert torch.isinf(net(x)[:, 5]).all()


def test_parameters_at_vit_b_width():
    assert (NOISE_768, LAYERS_768, FIXED_768, NORMS_768) == (889_344, 7_087_104, 3_538_944, 38_400)
    m = 64  # a small projection: the counts of the rest do not depend on it
    s = strategy("min", vit_backbone("vit_base_patch16_224", 768), 100, buffer_size=m)
    net = s.model
    assert sum(p.numel() for p in net.sets[0].parameters()) == NOISE_768
    assert sum(p.numel() for p in net.layers.parameters()) == LAYERS_768
    assert sum(b.numel() for b in net.layers.buffers()) == FIXED_768
    assert sum(p.numel() for p in net.norms.parameters()) == NORMS_768
    assert net.projection.shape == (768, m) and net.analytic.R.shape == (m, m)
    net.begin_task(0, list(range(10)))
    net.add_noise()
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert trainable == NOISE_768 + LAYERS_768 + NORMS_768 + 10 * m + 10
    net.end_task(torch.ones(768))
    net.begin_task(1, list(range(10, 20)))
    net.add_noise()
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert trainable == NOISE_768 + 20 * m  # task 1's noise and the head over 20 classes
    assert net.analytic.W.shape == (m, 20)


# ---------------------------------------------------------------------- end to end

M = 256  # the projection of the small runs


@pytest.fixture(scope="module")
def min_run(tiny):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    out = run_stream("min", tiny, buffer_size=M, init_epochs=1)
    return (*out, before)


def test_end_to_end(min_run, tiny):
    s, recorder, _, before = min_run
    assert [len(row) for row in recorder.acc_matrix] == [1, 2, 3]
    net = s.model
    assert len(net.sets) == 3 and net.head is None
    assert net.order.tolist() == [0, 1, 2, 3]  # the stream relabels classes by task
    assert net.prototypes.shape == (3, 192) and net.analytic.W.shape == (M, 4)
    c = F.cosine_similarity(net.prototypes[1], net.prototypes[0], dim=0)
    assert_close(net.mix, torch.softmax(torch.stack([c, torch.tensor(1.0), torch.tensor(1.0)]), 0))
    # trainable: task 0 its noise, the M_l, the norms, the head with bias over 2 classes;
    # later the task's noise and the head over the seen classes
    assert recorder.trainable == [
        NOISE_192 + LAYERS_192 + NORMS_192 + 2 * M + 2,
        NOISE_192 + 3 * M,
        NOISE_192 + 4 * M,
    ]
    shared = LAYERS_192 + FIXED_192 + NORMS_192 + 192 * M + M * M
    assert recorder.stored == [
        shared + k * (NOISE_192 + 192 + 1) + classes * M for k, classes in ((1, 2), (2, 3), (3, 4))
    ]
    # it learns: chance is 25% on the 16 test images of the 4 classes
    assert recorder.acc_seen[-1] >= 75.0, recorder.acc_seen
    assert all(not p.abs().sum() for p in net.sets[0].parameters())  # w = 0 on task 0
    assert any(p.abs().sum() for p in net.layers.parameters())  # the M_l learnt
    for name, value in tiny.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(not b._forward_hooks for b in tiny.model.blocks)


def test_resumes_to_the_same_numbers(min_run, tiny):
    s, recorder, saved, _ = min_run
    state = torch.load(io.BytesIO(saved[1]), weights_only=False)
    resumed, resumed_recorder, _ = run_stream(
        "min", tiny, start=(1, state), buffer_size=M, init_epochs=1
    )
    assert resumed_recorder.acc_matrix == recorder.acc_matrix
    for name, value in s.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


def test_account_counts_one_pass(tmp_path):
    defaults = yaml.safe_load((REPO / "methods" / "min.yaml").read_text())["defaults"]
    cards = card_variant(
        tmp_path, REPO / "methods", "min", "min-small", defaults={**defaults, "buffer_size": M}
    )
    r = invoke(
        "account",
        "--methods",
        "min-small",
        "--backbone",
        "vit_tiny_patch16_224",
        "--tasks",
        "3",
        "--classes",
        "6",
        "--image-size",
        "32",
        "--cards",
        str(cards),
    )
    assert r.exit_code == 0, r.output
    row = next(line.split() for line in r.output.splitlines() if line.startswith("min-small"))
    shared = LAYERS_192 + FIXED_192 + NORMS_192 + 192 * M + M * M
    per_task = NOISE_192 + 192 + 1 + 2 * M  # noise, prototype, mixing weight, 2 classes
    # trainable on the last task (its noise, the head over 6 classes), added task 1,
    # added later, stored@end
    assert row[1:5] == [
        f"{NOISE_192 + 6 * M:,}",
        f"{shared + per_task:,}",
        f"{per_task:,}",
        f"{shared + 3 * per_task:,}",
    ]
    # one backbone pass, and the noise on its 5 tokens in 12 blocks (M_l, A_l, B_l and 3
    # tasks' mu and sigma), the projection and the classifier over 6 classes: matmuls
    noise = 5 * 12 * (2 * 192 * 192 + 4 * 192 * 192 + 3 * 2 * 2 * 192 * 192)
    extra = noise + 2 * 192 * M + 2 * M * 6
    one_pass = backbone_flops(vit_backbone("vit_tiny_patch16_224", 192))
    assert float(row[5]) == pytest.approx((one_pass + extra) / 1e9, abs=6e-4), r.output
    assert float(row[6]) == pytest.approx(1 + extra / one_pass, abs=6e-4), r.output
