"""Shared prompt pieces on constructed tensors: key matching, pull constraint,
batch vote, logit masks; DualPrompt's permute vs reshape layouts; CODA-Prompt's
orthogonal slices and frozen old components."""

from __future__ import annotations

import math

import pytest
import timm
import torch
from torch.testing import assert_close

from cl_bench.backbones.prompted import PromptedViT
from cl_bench.errors import UserError
from cl_bench.strategies.blocks.prompt_matching import (
    PromptKeys,
    class_mask,
    cosine,
    majority_vote,
    mask_logits,
)
from cl_bench.strategies.coda_prompt import CodaNet, attention_weights, orthonormal_rows
from cl_bench.strategies.dualprompt import gather_e_prompts
from cl_bench.strategies.l2p import L2PNet

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

INF = float("-inf")


@pytest.fixture(scope="module")
def pvit() -> PromptedViT:
    torch.manual_seed(0)
    return PromptedViT(
        timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=32)
    )


def keys_of(rows: list[list[float]]) -> PromptKeys:
    keys = PromptKeys(len(rows), len(rows[0]))
    keys.keys.data = torch.tensor(rows)
    return keys


# ------------------------------------------------------------------ matching, pull, vote


def test_topk_and_top1_matching_on_constructed_queries():
    keys = PromptKeys(6, 6)
    keys.keys.data = 2.0 * torch.eye(6)  # key m points along axis m: cos(q, k_m) = q_m / |q|
    q = torch.tensor([[0.0, 4.0, 1.0, 0.0, 5.0, 3.0], [6.0, 0.0, 0.0, 2.0, 0.0, 1.0]])
    assert keys.match(q, 3, batchwise=False).tolist() == [[4, 1, 5], [0, 3, 5]]
    assert keys.match(q, 1, batchwise=False).tolist() == [[4], [0]]
    assert_close(cosine(q, keys.keys)[0], q[0] / q[0].norm())


def test_pull_constraint_sums_matched_cosines_and_averages_over_batch():
    keys = keys_of([[1.0, 0.0], [1.0, 1.0], [0.0, 3.0]])
    q = torch.tensor([[2.0, 0.0], [0.0, 0.5]])
    idx = torch.tensor([[0, 1], [2, 1]])
    # sample 0: cos 1 + 1/sqrt2; sample 1: cos 1 + 1/sqrt2; mean over the batch
    assert_close(keys.pull(q, idx), torch.tensor(1 + 1 / math.sqrt(2)))
    assert_close(keys.pull(q[:1], idx[:1, :1]), torch.tensor(1.0))


def test_batchwise_vote_gives_every_image_the_most_chosen_ids():
    idx = torch.tensor([[0, 1], [1, 2], [1, 0], [3, 1]])  # counts 0:2 1:4 2:1 3:1
    assert majority_vote(idx, pool_size=5).tolist() == [[1, 0]] * 4
    tie = torch.tensor([[3], [2], [2], [3]])  # 2 and 3 twice each: the lower id wins
    assert majority_vote(tie, pool_size=5).tolist() == [[2]] * 4
    keys = PromptKeys(4, 4)
    keys.keys.data = torch.eye(4)
    q = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0.9, 0.1, 0, 0]])
    assert keys.match(q, 1, batchwise=True).tolist() == [[0]] * 3


# ------------------------------------------------------------------------------ masking


def test_class_mask_and_mask_logits():
    assert class_mask(5, [1, 3]).tolist() == [True, False, True, False, True]
    logits = torch.arange(5.0, requires_grad=True)
    out = mask_logits(logits, class_mask(5, [1, 3]))
    assert out.tolist() == [INF, 1.0, INF, 3.0, INF]
    assert logits.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]  # out of place


def test_training_masks_old_and_unseen_eval_masks_unseen(pvit):
    params = dict(pool_size=4, length=2, top_k=2, pull_weight=0.1, batchwise=False)
    model = L2PNet(pvit, lambda x: x, 6, params)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    model.begin_task(0, [0, 1])
    model.begin_task(1, [2, 3])
    model.train()
    raw = model.head(model.embed(x, pvit.query(x)))
    out = model(x)
    assert torch.isinf(out[:, [0, 1, 4, 5]]).all()  # old and unseen
    assert torch.equal(out[:, 2:4], raw[:, 2:4])  # the current task untouched
    model.eval()
    with torch.no_grad():
        out = model(x)
    assert torch.isfinite(out[:, :4]).all() and torch.isinf(out[:, 4:]).all()


# ---------------------------------------------------------------- DualPrompt reshape bug


def coded_pool(layers: int = 2, pool: int = 8, length: int = 3, dim: int = 4) -> torch.Tensor:
    """pool[l, kv, m, j, :] = 1000 l + 100 kv + 10 m + j: every slot identifiable."""
    grid = torch.meshgrid(*(torch.arange(n) for n in (layers, 2, pool, length)), indexing="ij")
    code = 1000 * grid[0] + 100 * grid[1] + 10 * grid[2] + grid[3]
    return code.float()[..., None].expand(-1, -1, -1, -1, dim)


def test_permute_gives_each_image_its_own_key_and_value():
    pool, idx = coded_pool(), torch.tensor([[2], [5], [7], [1]])
    out = gather_e_prompts(pool, idx, reshape_bug=False)
    assert out.shape == (2, 4, 2, 3, 4)
    for b in range(4):
        for kv in range(2):
            assert torch.equal(out[:, b, kv], pool[:, kv, idx[b, 0]])


def test_reshape_bug_mixes_images_and_keys_with_values():
    pool, idx = coded_pool(), torch.tensor([[2], [5], [7], [1]])
    out = gather_e_prompts(pool, idx, reshape_bug=True)
    b_size = 4
    for b in range(b_size):
        for kv in range(2):
            src_kv, src_b = divmod(2 * b + kv, b_size)  # flat position in the (2, B) grid
            assert torch.equal(out[:, b, kv], pool[:, src_kv, idx[src_b, 0]])
    # image 0: keys of images 0 and 1; image 2: values of images 0 and 1
    assert torch.equal(out[:, 0, 1], pool[:, 0, 5])
    assert torch.equal(out[:, 2, 0], pool[:, 1, 2])
    assert not torch.equal(out, gather_e_prompts(pool, idx, reshape_bug=False))
    # training (every image on task t's prompt): first half (K, K), second half (V, V)
    same = torch.full((4, 1), 3)
    bug = gather_e_prompts(pool, same, reshape_bug=True)
    assert torch.equal(bug[:, 0, 1], pool[:, 0, 3]) and torch.equal(bug[:, 3, 0], pool[:, 1, 3])
    # one image per batch: the two layouts coincide
    one = idx[2:3]
    assert torch.equal(gather_e_prompts(pool, one, True), gather_e_prompts(pool, one, False))


# ------------------------------------------------------------------------ CODA-Prompt


def test_attention_weights_are_cosines_of_masked_query_and_keys():
    g = torch.Generator().manual_seed(0)
    q, a, k = (torch.randn(*s, generator=g) for s in ((3, 8), (5, 8), (5, 8)))
    direct = torch.nn.functional.cosine_similarity(
        q[:, None, :] * a[None], k[None].expand(3, -1, -1), dim=-1
    )
    assert_close(attention_weights(q, a, k), direct)


def test_orthonormal_rows_against_non_orthogonal_old_rows():
    torch.manual_seed(0)
    old = torch.randn(6, 20)  # trained components: not orthogonal to each other
    new = orthonormal_rows(old, 4)
    assert (new @ old.T).abs().max() < 1e-5
    assert_close(new @ new.T, torch.eye(4), atol=1e-5, rtol=0)


def coda_params(**over) -> dict:
    return dict(pool_size=12, length=4, layers=[0, 1], ortho_mu=0.0, n_tasks=3) | over


def test_coda_new_slice_orthogonal_and_old_slices_frozen(pvit):
    torch.manual_seed(1)
    model = CodaNet(pvit, lambda x: x, 6, coda_params())
    model.begin_task(0, [0, 1])
    assert model.span == (0, 4)
    with torch.no_grad():  # stand-in for training: old slices drift off orthogonality
        for t in (model.p, model.k, model.a):
            t[:, :4] += 0.3 * torch.randn_like(t[:, :4])
    before = {name: t.detach().clone() for name, t in model.named_parameters()}
    model.begin_task(1, [2, 3])
    assert model.span == (4, 8)
    for t in (model.p, model.k, model.a):
        for layer in range(2):
            flat = t[layer].detach().flatten(1)
            assert (flat[4:8] @ flat[:4].T).abs().max() < 1e-5
            assert_close(flat[4:8] @ flat[4:8].T, torch.eye(4), atol=1e-5, rtol=0)
    for name, t in model.named_parameters():
        if name in ("p", "k", "a"):
            assert torch.equal(t[:, :4], before[name][:, :4]), name
            assert not t[:, 8:].any()  # later tasks' components untouched (zero)

    model.train()
    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    loss = model.head(model.embed(x, pvit.query(x))).square().mean()
    loss.backward()
    for t in (model.p, model.k, model.a):
        assert not t.grad[:, :4].any() and not t.grad[:, 8:].any()
        assert t.grad[:, 4:8].abs().sum() > 0
    frozen = model.p.detach()[:, :4].clone()
    opt.step()
    assert torch.equal(model.p[:, :4], frozen)


def test_coda_eval_uses_components_up_to_current_task(pvit):
    torch.manual_seed(2)
    model = CodaNet(pvit, lambda x: x, 6, coda_params())
    model.begin_task(0, [0, 1])
    model.begin_task(1, [2, 3])
    model.eval()
    assert model._active(model.k).shape == (2, 8, pvit.dim)
    model.train()
    active = model._active(model.k)
    assert active.shape == (2, 8, pvit.dim) and torch.equal(active, model.k[:, :8])


def test_coda_derives_task_count_and_rejects_a_task_too_many(pvit):
    model = CodaNet(pvit, lambda x: x, 6, coda_params(n_tasks=0))
    model.begin_task(0, [0, 1])
    assert model.n_tasks == 3 and model.span == (0, 4)
    with pytest.raises(UserError, match="n_tasks"):
        model.begin_task(3, [5])
