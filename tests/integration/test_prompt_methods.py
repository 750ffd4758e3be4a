"""L2P, DualPrompt and CODA-Prompt: trainable parameters against the
papers' prompt shapes, and each strategy trained on a tiny synthetic stream (random-weight
ViT-Tiny at 32 px, 4 classes in tasks of 2 + 1 + 1) as ``runner.run_one``
drives it."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from cl_bench.backbones.base import Backbone
from cl_bench.backbones.prompted import PromptedViT
from cl_bench.contract import drive
from cl_bench.engine.environment import seed_everything
from cl_bench.engine.recording import Recorder
from cl_bench.errors import UserError
from cl_bench.scenarios.loaders import synthetic
from cl_bench.scenarios.order import task_split
from cl_bench.scenarios.stream import Stream, build_stream
from cl_bench.scenarios.transforms import ToModelInput
from tests.helpers.cli import invoke
from tests.helpers.strategies import strategy, vit_backbone

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

CPU = torch.device("cpu")
METHODS = ("l2p", "dualprompt", "coda-prompt")
N_CLASSES = 4


def trainable(s) -> int:
    return sum(p.numel() for p in s.model.parameters() if p.requires_grad)


def expected_prompt_params(method: str, d: int) -> int:
    """The papers' prompt shapes as formulas in the width d."""
    return {
        "l2p": 10 * 5 * d + 10 * d,  # prompts + keys
        "dualprompt": 2 * 2 * 5 * d + 3 * 2 * 10 * 5 * d + 10 * d,  # G + E + keys
        "coda-prompt": 5 * 100 * (8 + 2) * d,
    }[method]  # (P + K + A) x 5 layers


# ------------------------------------------------------------------ parameter counts


def test_trainable_counts_at_768():
    backbone, n = vit_backbone("vit_base_patch16_224", 768), 100
    assert [expected_prompt_params(m, 768) for m in METHODS] == [46_080, 253_440, 3_840_000]
    for method in METHODS:
        s = strategy(method, backbone, n)
        assert trainable(s) == expected_prompt_params(method, 768) + 768 * n + n, method
        assert all(p.requires_grad for p in s.model.parameters())
    assert not any(p.requires_grad for p in backbone.model.parameters())


def test_trainable_counts_at_192(tiny):
    assert [expected_prompt_params(m, 192) for m in METHODS] == [11_520, 63_360, 960_000]
    for method in METHODS:
        assert (
            trainable(strategy(method, tiny, 10))
            == expected_prompt_params(method, 192) + 192 * 10 + 10
        ), method


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tiny() -> Backbone:
    return vit_backbone("vit_tiny_patch16_224", 192)


@pytest.fixture(scope="module")
def stream() -> Stream:
    data = synthetic(n_classes=N_CLASSES, train_per_class=8, test_per_class=4, size=32)
    tf = ToModelInput(32)
    return build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        [2, 0, 3, 1],
        task_split(N_CLASSES, 2, 1),
        test_shuffle=True,
        seed=1993,
        train_transform=tf,
        eval_transform=tf,
    )


@pytest.fixture(scope="module")
def runs(tiny, stream) -> dict:
    """Each method trained for one epoch per task, evaluated after each task."""
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    out = {}
    for method in METHODS:
        seed_everything(1993)
        recorder = Recorder(stream.task_of_label, progress=False)
        # the stream has 3 tasks of unequal size: CODA cannot derive T from the first
        extra = {"n_tasks": 3} if method == "coda-prompt" else {}
        s = strategy(method, tiny, N_CLASSES, [recorder], epochs=1, **extra)
        start = {k: v.clone() for k, v in s.model.state_dict().items()}
        drive(s, stream)
        out[method] = (s, recorder, start)
    out["backbone_before"] = before
    return out


@pytest.mark.parametrize("method", METHODS)
def test_accuracy_matrix_and_prompts_trained(runs, method):
    s, recorder, start = runs[method]
    assert [len(row) for row in recorder.acc_matrix] == [1, 2, 3]
    assert all(0.0 <= a <= 100.0 for row in recorder.acc_matrix for a in row)
    assert len(recorder.acc_seen) == 3
    assert recorder.trainable == [trainable(s)] * 3
    changed = [k for k, v in s.model.state_dict().items() if not torch.equal(v, start[k])]
    assert "head.weight" in changed and len(changed) >= 3, changed


def test_routing_recorded_for_dualprompt_only(runs):
    assert all(r is not None and 0.0 <= r <= 100.0 for r in runs["dualprompt"][1].routing_acc)
    assert runs["l2p"][1].routing_acc == [None] * 3
    assert runs["coda-prompt"][1].routing_acc == [None] * 3


def test_dualprompt_trains_each_task_own_e_prompt(runs):
    s, _, start = runs["dualprompt"]
    # pool slots 0-2 trained (slot t starts from slot t-1); slots 3.. untouched
    assert not torch.equal(s.model.e[:, :, :3], start["e"][:, :, :3])
    assert torch.equal(s.model.e[:, :, 3:], start["e"][:, :, 3:])


def test_shared_backbone_is_unchanged_and_frozen(runs, tiny):
    for name, value in tiny.model.state_dict().items():
        assert torch.equal(value, runs["backbone_before"][name]), name
    assert not any(p.requires_grad for p in tiny.model.parameters())
    assert all("forward" not in blk.attn.__dict__ for blk in tiny.model.blocks)


def train_model(tiny, method: str, stream, **overrides):
    """The model after the ``runs`` fixture's schedule, with ``overrides``."""
    seed_everything(1993)
    extra = {"n_tasks": 3} if method == "coda-prompt" else {}
    recorder = Recorder(stream.task_of_label, progress=False)
    s = strategy(method, tiny, N_CLASSES, [recorder], epochs=1, **extra, **overrides)
    drive(s, stream)
    return s, recorder


@pytest.mark.parametrize("method", METHODS)
def test_activation_checkpointing_trains_the_same_model(runs, tiny, stream, method):
    s, recorder = train_model(tiny, method, stream, checkpoint_blocks=12)
    reference, reference_recorder, _ = runs[method]
    for name, value in reference.model.state_dict().items():
        assert torch.equal(s.model.state_dict()[name], value), name
    assert recorder.acc_matrix == reference_recorder.acc_matrix


def test_checkpoint_blocks_beyond_the_depth_is_a_user_error(tiny):
    with pytest.raises(
        UserError,
        match="checkpoint_blocks = 13, but vit_tiny_patch16_224 has 12 blocks; use 0 to 12",
    ):
        strategy("l2p", tiny, N_CLASSES, checkpoint_blocks=13)


def test_cached_queries_replace_the_query_pass(runs, tiny, monkeypatch):
    """Given the frozen features as queries, the model never runs its query pass
    and trains the same prompts (up to GEMM rounding of the batched extraction)."""
    data = synthetic(n_classes=N_CLASSES, train_per_class=8, test_per_class=4, size=32)
    tf = ToModelInput(32)
    queries = [tiny.features(tf(x)) for x in (data.train_x, data.test_x)]
    cached = build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        [2, 0, 3, 1],
        task_split(N_CLASSES, 2, 1),
        test_shuffle=True,
        seed=1993,
        train_transform=tf,
        eval_transform=tf,
        train_query=queries[0],
        test_query=queries[1],
    )
    assert len(cached.train[0].dataset[0]) == 4  # image, label, query, task
    calls = []
    monkeypatch.setattr(PromptedViT, "query", lambda self, x: calls.append(1))
    s, recorder = train_model(tiny, "l2p", cached)
    assert calls == []
    reference, reference_recorder, _ = runs["l2p"]
    for name, value in reference.model.state_dict().items():
        assert_close(s.model.state_dict()[name], value, rtol=1e-4, atol=1e-5)
    assert recorder.acc_matrix == reference_recorder.acc_matrix


def test_model_with_its_own_query_equals_the_model_given_it(tiny):
    s = strategy("l2p", tiny, N_CLASSES)
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    model = s.model.eval()
    with torch.no_grad():
        q = model.vit.query(model.normalize(x))
        assert torch.equal(model(x, q), model(x))


def test_bad_checkpoint_blocks_stops_the_cli_before_any_run(tmp_path):
    result = invoke(
        "run",
        "--out",
        str(tmp_path),
        "--methods",
        "l2p",
        "--scenario",
        "synthetic",
        "--backbone",
        "vit_tiny_patch16_224",
        "--weights",
        "random",
        "--image-size",
        "32",
        "--set",
        "l2p.checkpoint_blocks=13",
        "--no-progress",
    )
    assert result.exit_code == 2
    assert "checkpoint_blocks = 13, but vit_tiny_patch16_224 has 12 blocks" in result.output
    assert "Traceback" not in result.output and not list(tmp_path.rglob("*.*"))
