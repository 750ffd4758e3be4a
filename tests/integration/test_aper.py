"""APER: the prototypes are the class means of [frozen, adapted] features, the adapted
features come from the feature store under the adapted weights' digest, the
accounting counts the adaptation and both backbone passes, and it learns."""

from __future__ import annotations

import json

import pytest
import torch

from cl_bench import scenarios
from cl_bench.backbones import load_backbone
from cl_bench.cards.catalogue import load_method, load_scenario
from cl_bench.contract import AdaptedStream, drive
from cl_bench.engine.features import FeatureStore
from cl_bench.engine.recording import Recorder
from cl_bench.engine.runner import features_stream, quiet_evaluator
from cl_bench.errors import UserError
from cl_bench.scenarios import load_data, scenario_order
from cl_bench.scenarios.order import task_split
from cl_bench.scenarios.stream import build_stream
from cl_bench.scenarios.transforms import eval_transform, train_transform
from cl_bench.strategies.aper import Aper
from cl_bench.strategies.blocks.first_session_adapt import BatchNormStats, check_variant
from tests.helpers.cli import invoke
from tests.helpers.processes import (
    VIT_STREAM,
    assert_same_numbers,
    cl_bench,
    kill_and_resume,
    records,
)
from tests.helpers.streams import balanced_subset

TINY = [
    "--scenario",
    "synthetic",
    "--backbone",
    "vit_tiny_patch16_224",
    "--weights",
    "random",
    "--image-size",
    "32",
    "--precision",
    "fp32",
    "--no-progress",
]


def drive_aper(adapt: str):
    """APER on `synthetic` with a random ViT-Tiny at 32 px, driven as the runner does;
    returns the strategy, its store, the data and the class order."""
    card = load_method("aper")
    params = dict(card.params, adapt=adapt, epochs=1)
    scenario = load_scenario("synthetic")
    data = load_data(scenario, None, False)
    backbone = load_backbone("vit_tiny_patch16_224", "random", 32)
    order = scenario_order(scenario, data.n_classes, 1993)
    sizes = task_split(data.n_classes, 2, 2)
    images = build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        order,
        sizes,
        test_shuffle=True,
        seed=1993,
        train_transform=train_transform(False, 32),
        eval_transform=eval_transform(False, 32),
    )
    store = FeatureStore(torch.device("cpu"), progress=False, use_disk=False)
    stream = AdaptedStream(
        images,
        backbone,
        lambda backbones: features_stream(store, data, order, sizes, True, 1993, backbones),
    )
    torch.manual_seed(0)
    strategy = Aper(
        params=params,
        backbone=backbone,
        n_classes=10,
        device=torch.device("cpu"),
        plugins=[Recorder(images.task_of_label, backbone, progress=False)],
        evaluator=quiet_evaluator(),
    )
    drive(strategy, stream)
    return strategy, store, data, order, backbone


def test_prototypes_are_the_class_means_of_frozen_and_adapted_features():
    strategy, store, data, order, backbone = drive_aper("adapter")
    frozen, adapted = strategy.feature_backbones(backbone)
    assert adapted is not frozen and adapted.name == "vit_tiny_patch16_224+adapter"
    assert adapted.weights_digest != frozen.weights_digest
    phi = torch.cat([store.get(frozen, data, "train"), store.get(adapted, data, "train")], 1)
    assert phi.shape[1] == 2 * 192
    position = torch.tensor([order.index(int(c)) for c in data.train_y])
    rows = strategy.model.classifier.weight
    assert rows.shape == (10, 384)
    for c in range(10):
        # task 1's rows come from the method's own pass, later ones from the store: both
        # equal the hand-computed mean of the cached features
        assert torch.allclose(rows[c], phi[position == c].mean(0), atol=1e-6), c
    # the adapters moved (the adapted features are not the frozen ones) and are frozen now
    assert not torch.equal(phi[:, :192], phi[:, 192:])
    assert not any(p.requires_grad for p in strategy.model.parameters())


def test_adapt_none_is_simplecil_on_the_frozen_features():
    strategy, store, data, order, backbone = drive_aper("none")
    assert strategy.feature_backbones(backbone) == [backbone]
    x = store.get(backbone, data, "train")
    position = torch.tensor([order.index(int(c)) for c in data.train_y])
    means = torch.stack([x[position == c].mean(0) for c in range(10)])
    assert torch.allclose(strategy.model.classifier.weight, means, atol=1e-6)


def test_accounting_of_an_adapted_run(tmp_path):
    result = invoke(
        "run",
        "--out",
        str(tmp_path),
        *TINY,
        "--methods",
        "aper,simplecil",
        "--set",
        "aper.epochs=1",
    )
    assert result.exit_code == 0, result.output
    found = {
        json.loads(p.read_text())["method"]: json.loads(p.read_text())
        for p in tmp_path.glob("runs/synthetic/*/*.json")
    }
    acc, base = found["aper"]["accounting"], found["simplecil"]["accounting"]
    assert found["aper"]["config"]["method"]["adapt"] == "adapter"
    adapters = 12 * (2 * 192 * 64 + 64 + 192)
    assert acc["trainable_per_task"] == [adapters + 2 * 192 + 1, 0, 0, 0, 0]
    # kept: the adapters, 2 prototypes of width 2 d per task, the (fixed) scale
    assert acc["stored_per_task"] == [adapters + 1 + 2 * k * 384 for k in range(1, 6)]
    # two backbone passes per test image: the frozen one and the adapted one
    ratio = acc["inference_gflops_per_image"] / base["inference_gflops_per_image"]
    assert 2.0 < ratio < 2.2


@pytest.mark.parametrize(
    ("adapt", "variant", "epochs", "batch", "decay"),
    [("auto", "bn", 1, 128, 0.0005), ("finetune", "finetune", 1, 128, 0.05)],
)
def test_cnn_variants_counted_as_stored(tmp_path, adapt, variant, epochs, batch, decay):
    """EfficientNet-Lite0 (random, 32 px). auto means bn: only the re-estimated
    batch-norm statistics are stored, only the discarded head trains; finetune: the
    whole adapted copy. Each records its variant's own defaults (batch 128; finetune's
    weight decay 0.05) under the explicit epochs, and the dry run plans exactly that
    result (done)."""
    args = [
        "run",
        "--out",
        str(tmp_path),
        "--scenario",
        "synthetic",
        "--weights",
        "random",
        "--image-size",
        "32",
        "--precision",
        "fp32",
        "--no-progress",
        "--methods",
        "aper",
        "--set",
        "aper.epochs=1",
        "--set",
        f"aper.adapt={adapt}",
    ]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    [path] = tmp_path.glob("runs/synthetic/aper/*.json")
    record = json.loads(path.read_text())
    method = record["config"]["method"]
    assert (method["adapt"], method["epochs"], method["batch_size"], method["weight_decay"]) == (
        variant,
        epochs,
        batch,
        decay,
    )
    plan = invoke(*args, "--dry-run")
    assert plan.exit_code == 0, plan.output
    assert f"  done     aper seed 1993  {path}" in plan.stdout.splitlines()
    bb = load_backbone("efficientnet_lite0", "random", 32).model
    head = sum(p.numel() for p in bb.get_classifier().parameters())
    weights = sum(p.numel() for p in bb.parameters()) - head
    stats = sum(b.numel() for b in bb.buffers())
    adapted = weights + stats if variant == "finetune" else stats
    acc = record["accounting"]
    assert acc["trainable_per_task"][0] == adapted - stats + 2 * 1280 + 1
    assert acc["stored_at_end"] == adapted + 1 + 10 * 2 * 1280


def test_bn_variant_re_estimates_the_statistics_from_zero():
    """APER w/ BN (official aper_bn.py): the statistics start at zero and follow batch
    norm's running update over the passes; the shared CNN and every weight stay as
    they are; a ViT (no batch norm) refuses the variant."""
    backbone = load_backbone("efficientnet_lite0", "random", 32)
    before = {k: v.clone() for k, v in backbone.model.state_dict().items()}
    bn = BatchNormStats(backbone)
    assert all(not t.any() for t in bn.buffers())
    layer = backbone.model.get_submodule(bn.names[0])
    x = backbone.normalize(torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
    first = backbone.model.conv_stem(x)  # the input of the first batch norm
    bn.train()
    for _ in range(3):
        bn(x)
    mean = first.mean((0, 2, 3))
    var = first.var((0, 2, 3), unbiased=True)
    m = layer.momentum
    expected_mean = mean * (1 - (1 - m) ** 3)  # three updates from zero with the same batch
    expected_var = var * (1 - (1 - m) ** 3)
    assert torch.allclose(bn.mean0, expected_mean, atol=1e-6)
    assert torch.allclose(bn.var0, expected_var, rtol=1e-4, atol=1e-6)
    assert int(bn.count0) == 3
    after = backbone.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not any(p.requires_grad for p in bn.parameters())
    vit = load_backbone("vit_tiny_patch16_224", "random", 32)
    with pytest.raises(UserError, match='adapt = "bn" re-estimates batch-norm statistics'):
        check_variant("bn", vit)


def test_killed_runs_resume_with_identical_numbers(vit_killed_and_resumed):
    """APER and RanPAC (first-session adaptation, then features) killed after task 1
    (in the command tests/integration/conftest.py shares with EWC and L2P)."""
    reference, final = vit_killed_and_resumed
    for method in ("aper", "ranpac"):
        assert final[method]["timing"]["resumed_from_task"] == 1
        assert_same_numbers(final[method], reference[method])


def test_killed_bn_run_resumes_with_identical_numbers(tmp_path):
    """APER w/ BN on a random EfficientNet-Lite0: the re-estimated statistics come back
    from the checkpoint, so the resumed run equals the uninterrupted one."""
    at = VIT_STREAM.index("--backbone")
    cnn = VIT_STREAM[:at] + VIT_STREAM[at + 2 :]  # the same small stream, the default CNN
    args = [*cnn, "--set", "aper.epochs=1"]
    reference = cl_bench(tmp_path / "reference", *args, "--methods", "aper")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    final = kill_and_resume(tmp_path / "out", args, ["aper"], kill_after=0, tasks=3)
    assert final["aper"]["config"]["method"]["adapt"] == "bn"
    assert final["aper"]["timing"]["resumed_from_task"] == 1
    assert_same_numbers(final["aper"], records(tmp_path / "reference")["aper"])


def test_learns_on_fmnist_features(tmp_path, monkeypatch):
    """Frozen EfficientNet-Lite0 features at 112 px (the CI setting), one command for
    both first-session methods: APER with adapt: none, RanPAC with M = 2,000; on 2,000
    of the 5,000 training and 500 of the 1,000 test images, balanced over the classes
    (the whole set: `cl-bench check --suite ci`, RanPAC 86.5 %)."""
    full = scenarios.LOADERS["fmnist"]
    monkeypatch.setitem(
        scenarios.LOADERS,
        "fmnist",
        lambda root, **args: balanced_subset(full(root, **args), 2000, 500),
    )
    result = invoke(
        "run",
        "--out",
        str(tmp_path),
        "--scenario",
        "fmnist",
        "--image-size",
        "112",
        "--precision",
        "fp32",
        "--no-progress",
        "--methods",
        "aper,ranpac",
        "--set",
        "aper.adapt=none",
        "--set",
        "ranpac.M=2000",
    )
    assert result.exit_code == 0, result.output
    [aper] = tmp_path.glob("runs/fmnist/aper/*.json")
    assert json.loads(aper.read_text())["last_acc"] > 70.0  # chance: 10
    [ranpac] = tmp_path.glob("runs/fmnist/ranpac/*.json")
    record = json.loads(ranpac.read_text())
    assert record["config"]["method"]["adapt"] == "none"  # auto on a CNN
    assert record["last_acc"] > 70.0  # chance: 10
