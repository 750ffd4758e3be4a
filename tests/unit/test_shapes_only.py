"""Counting without arithmetic (cl_bench.accounting.shapes_only): the skipped
operations return zeros of their real layout, the FLOP counter counts them as the
real ones, and every other operation runs."""

from __future__ import annotations

import timm
import torch
import torch.nn.functional as F

from cl_bench.accounting.count import counting
from cl_bench.accounting.shapes_only import shapes_only, skipped


def test_a_product_is_zeros_of_its_shape_and_counted():
    torch.manual_seed(0)
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    with shapes_only(), counting() as c:
        out = a @ b
    assert out.shape == (5, 3) and out.dtype == torch.float32 and out.is_contiguous()
    assert torch.equal(out, torch.zeros(5, 3))
    assert c.get_total_flops() == 2 * 5 * 7 * 3


def test_other_operations_run():
    x = torch.tensor([1.0, -2.0, 3.0])
    with shapes_only():
        assert torch.equal(x.abs() + 1, torch.tensor([2.0, 3.0, 4.0]))
        assert torch.nonzero(x > 0).flatten().tolist() == [0, 2]


def test_linear_algebra_is_skipped_with_its_layout():
    cov = torch.eye(4).expand(3, 4, 4) * 2
    with shapes_only():
        factor = torch.linalg.cholesky(cov)
        solved = torch.linalg.solve(cov, torch.ones(3, 4, 1))
    assert factor.shape == (3, 4, 4) and not factor.any()
    assert solved.shape == (3, 4, 1)
    assert skipped(torch.ops.aten.linalg_cholesky_ex.default)
    assert not skipped(torch.ops.aten.add.Tensor)


def test_attention_output_has_the_real_strides():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    real = F.scaled_dot_product_attention(q, k, v)
    with shapes_only():
        fake = F.scaled_dot_product_attention(q, k, v)
    assert (fake.shape, fake.stride(), fake.dtype) == (real.shape, real.stride(), real.dtype)


def test_vit_forward_and_backward_count_as_the_real_ones():
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=3, img_size=32)
    x = torch.rand(2, 3, 32, 32)
    with counting() as real:
        model(x).sum().backward()
    model.zero_grad()
    with shapes_only(), counting() as fake:
        out = model(x)
        out.sum().backward()
    assert fake.get_total_flops() == real.get_total_flops()
    assert out.shape == (2, 3)
    assert model.head.weight.grad.shape == (3, 192)


def test_in_inference_mode_a_composite_op_is_skipped_through_its_parts():
    """Inference mode dispatches aten.linear whole (autograd does not decompose it): its
    product must still be skipped and counted."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(7, 3)
    with shapes_only(), torch.inference_mode(), counting() as c:
        out = layer(torch.randn(5, 7))
    assert out.shape == (5, 3) and not out.any()  # addmm, bias included, is skipped
    assert c.get_total_flops() == 2 * 5 * 7 * 3
