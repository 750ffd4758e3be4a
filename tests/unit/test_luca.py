"""LuCA (TOSCA's per-task module): parameter counts, flows, init, entropy and
module selection, checked against the TOSCA paper (arXiv 2502.14762) and its official
code (github.com/muratonuryildirim/tosca, models/tosca.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from cl_bench.strategies.blocks.luca import FLOWS, LuCA, entropy, select_module


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def expected_counts(d: int, r: int = 16, s: int = 16) -> tuple[int, int, int]:
    """(adapter, LayerNorm, calibrator) from the paper's LuCA formulas."""
    h, q = d // r, d // s
    adapter = d * h + h + h * d + d  # Linear(d->h, bias) + Linear(h->d, bias)
    norm = 2 * d  # LayerNorm weight + bias
    calibrator = 2 * d * q  # Linear(d->q) + Linear(q->d), no bias
    return adapter, norm, calibrator


# ----------------------------------------------------------------------------- parameter counts


def test_param_count_vit_base_width():
    m = LuCA(768)
    assert n_params(m.adapter) == 74_544
    assert n_params(m.norm) == 1_536
    assert n_params(m.calibrator) == 73_728
    assert n_params(m) == 149_808
    assert expected_counts(768) == (74_544, 1_536, 73_728)


@pytest.mark.parametrize("d, r, s", [(192, 16, 16), (384, 16, 16), (32, 16, 16), (256, 8, 4)])
def test_param_count_formula_other_widths(d, r, s):
    m = LuCA(d, mlp_ratio=r, se_ratio=s)
    adapter, norm, calibrator = expected_counts(d, r, s)
    assert n_params(m.adapter) == adapter
    assert n_params(m.norm) == norm
    assert n_params(m.calibrator) == calibrator
    assert n_params(m) == adapter + norm + calibrator


def test_param_count_d192_by_hand():
    # d = 192, ratio 16 -> hidden 12: adapter 192*12 + 12 + 12*192 + 192 = 4,812;
    # LayerNorm 384; calibrator 2*192*12 = 4,608; total 9,804
    m = LuCA(192)
    assert (n_params(m.adapter), n_params(m.norm), n_params(m.calibrator)) == (4_812, 384, 4_608)
    assert n_params(m) == 9_804


def test_calibrator_has_no_bias_and_adapter_has_biases():
    m = LuCA(64)
    assert m.calibrator[0].bias is None and m.calibrator[2].bias is None
    assert m.adapter[0].bias is not None and m.adapter[2].bias is not None
    assert m.adapter[0].weight.shape == (4, 64) and m.adapter[2].weight.shape == (64, 4)


def test_unknown_flow_raises():
    with pytest.raises(ValueError, match="flow"):
        LuCA(32, flow="serial")


# ----------------------------------------------------------------------------- flows


def manual_parts(m: LuCA, x: torch.Tensor):
    """A(x), C(.) and LN(.) written out from the module's weights."""
    w1, b1 = m.adapter[0].weight, m.adapter[0].bias
    w2, b2 = m.adapter[2].weight, m.adapter[2].bias
    v1, v2 = m.calibrator[0].weight, m.calibrator[2].weight
    d = x.shape[-1]

    def adapter(z):
        return F.linear(F.gelu(F.linear(z, w1, b1)), w2, b2)

    def calibrator(z):
        return torch.sigmoid(F.linear(F.relu(F.linear(z, v1)), v2))

    def norm(z):
        return F.layer_norm(z, (d,), m.norm.weight, m.norm.bias, m.norm.eps)

    return adapter, calibrator, norm


def randomized(flow: str, d: int = 48) -> LuCA:
    torch.manual_seed(7)
    m = LuCA(d, mlp_ratio=4, se_ratio=4, flow=flow)
    with torch.no_grad():  # make LayerNorm's affine part and all biases non-trivial
        m.norm.weight.normal_(1.0, 0.3)
        m.norm.bias.normal_(0.0, 0.3)
        m.adapter[0].bias.normal_(0.0, 0.3)
        m.adapter[2].bias.normal_(0.0, 0.3)
    return m


@pytest.mark.parametrize("flow", FLOWS)
def test_flow_matches_equation(flow):
    m = randomized(flow)
    x = torch.randn(10, 48, generator=torch.Generator().manual_seed(3)) * 2.0
    A, C, LN = manual_parts(m, x)
    if flow == "tosca":
        h = LN(x + A(x))
        expected = h * C(h)
    elif flow == "tosca_r":
        expected = x * C(x) + LN(A(x))
    elif flow == "adapter":
        expected = LN(A(x))
    else:
        expected = x * C(x)
    with torch.no_grad():
        out = m(x)
        assert_close(out, expected)
        assert out.shape == x.shape


def test_flows_differ_from_each_other():
    x = torch.randn(6, 48, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        outs = {}
        for flow in FLOWS:
            m = randomized("tosca")
            m.flow = flow  # same weights, different wiring
            outs[flow] = m(x)
    for a in FLOWS:
        for b in FLOWS:
            if a < b:
                assert not torch.allclose(outs[a], outs[b]), (a, b)


# ----------------------------------------------------------------------------- init


def test_reset_parameters_xavier_zero_bias_layernorm_identity():
    torch.manual_seed(0)
    m = LuCA(96, mlp_ratio=8, se_ratio=4)
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(5.0)
    m.reset_parameters()
    linears = [m.adapter[0], m.adapter[2], m.calibrator[0], m.calibrator[2]]
    for lin in linears:
        fan_out, fan_in = lin.weight.shape
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        w = lin.weight.detach()
        assert float(w.abs().max()) <= bound + 1e-7
        # really re-drawn (not left at 5, not zero) and spread over the range
        assert float(w.abs().max()) > 0.5 * bound
        assert float(w.std()) > 0.2 * bound
        if lin.bias is not None:
            assert torch.count_nonzero(lin.bias) == 0
    assert torch.equal(m.norm.weight.detach(), torch.ones(96))
    assert torch.equal(m.norm.bias.detach(), torch.zeros(96))


def test_default_init_is_not_xavier():
    """PyTorch's default Linear init has non-zero biases (what task 0 keeps under
    init='official'); reset_parameters zeroes them."""
    torch.manual_seed(0)
    m = LuCA(64)
    assert torch.count_nonzero(m.adapter[0].bias) > 0
    m.reset_parameters()
    assert torch.count_nonzero(m.adapter[0].bias) == 0


# ----------------------------------------------------------------------------- entropy


def test_entropy_uniform_is_log_c():
    assert abs(float(entropy(torch.zeros(4))) - math.log(4)) < 1e-6
    assert abs(float(entropy(torch.full((1, 10), 3.7))[0]) - math.log(10)) < 1e-6


def test_entropy_one_hot_is_near_zero():
    h = float(entropy(torch.tensor([100.0, 0.0, 0.0, 0.0])))
    assert abs(h) < 1e-6


def test_entropy_hand_example_and_batch_shape():
    # p = (1/2, 1/4, 1/4): H = 1/2 log 2 + 2 * 1/4 log 4 = 1.5 log 2
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]))
    h = entropy(logits)
    assert h.shape == (2,)
    assert_close(h, torch.tensor([1.5 * math.log(2), math.log(3)]), atol=1e-6, rtol=0)
    # the formula exactly, including the 1e-9
    p = torch.softmax(logits, -1)
    assert_close(h, -(p * torch.log(p + 1e-9)).sum(-1))


def test_entropy_over_last_dim_of_stacked_logits():
    logits = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(1))
    h = entropy(logits)
    assert h.shape == (3, 5)
    assert_close(h[1, 2], entropy(logits[1, 2]))


# ----------------------------------------------------------------------------- selection


def routing_logits() -> torch.Tensor:
    """(T=2, B=4, C=3). Module 0 is sure about images 0 and 2 (H ~ 0) and
    clueless about 1 and 3 (H = log 3 ~ 1.099): mean H ~ 0.55. Module 1 is
    moderately sure about all four (H ~ 0.37 each): mean H ~ 0.37."""
    sure, clueless, moderate = [20.0, 0.0, 0.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.0]
    return torch.tensor([[sure, clueless, sure, clueless], [moderate] * 4])


def test_select_module_sample_vs_batch():
    logits = routing_logits()
    h = entropy(logits)
    # the construction does what the docstring says
    assert float(h[0, 0]) < 1e-6 and abs(float(h[0, 1]) - math.log(3)) < 1e-6
    assert 0.3 < float(h[1, 0]) < 0.45
    assert float(h[1].mean()) < float(h[0].mean())

    sample = select_module(logits, "sample")
    batch = select_module(logits, "batch")
    assert torch.equal(sample, torch.tensor([0, 1, 0, 1]))
    assert torch.equal(batch, torch.tensor([1, 1, 1, 1]))
    assert sample.dtype == batch.dtype == torch.long
    assert not torch.equal(sample, batch)


def test_select_module_batch_picks_lowest_mean_even_if_it_loses_per_sample():
    # module 1 wins image 0 by a hair, module 0 wins the batch mean
    logits = torch.tensor(
        [[[0.0, 0.0], [9.0, 0.0], [9.0, 0.0]], [[0.1, 0.0], [0.0, 0.0], [0.0, 0.0]]]
    )
    assert torch.equal(select_module(logits, "sample"), torch.tensor([1, 0, 0]))
    assert torch.equal(select_module(logits, "batch"), torch.tensor([0, 0, 0]))


def test_select_module_unknown_rule():
    with pytest.raises(ValueError, match="selection"):
        select_module(routing_logits(), "vote")
