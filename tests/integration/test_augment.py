"""Cached augmented views (``augment_views: K``): the deterministic view transform,
the view-per-epoch selection, the feature store's views, and a TOSCA run on them."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import torch
from PIL import Image

from cl_bench.engine import features
from cl_bench.engine.epoch_views import EpochView, ViewClock, evaluation_view
from cl_bench.engine.features import FeatureStore
from cl_bench.engine.recording import Recorder
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.scenarios.augment import RATIO, SCALE, AugmentedView, crop_box
from cl_bench.scenarios.stream import build_stream
from cl_bench.scenarios.transforms import ToModelInput
from cl_bench.strategies.tosca import Tosca
from tests.helpers.cli import invoke

CPU = torch.device("cpu")


def test_crop_box_stays_inside_and_respects_scale_and_ratio():
    for seed in range(200):
        top, left, h, w = crop_box(40, 60, torch.Generator().manual_seed(seed))
        assert 0 <= top and top + h <= 40 and 0 <= left and left + w <= 60
        # rounding of h and w moves area and ratio a little off the sampled values
        assert SCALE[0] * 0.8 <= h * w / (40 * 60) <= SCALE[1]
        assert RATIO[0] * 0.8 <= w / h <= RATIO[1] * 1.25


def test_crop_box_is_deterministic_and_falls_back_to_a_central_box():
    assert crop_box(40, 60, torch.Generator().manual_seed(3)) == crop_box(
        40, 60, torch.Generator().manual_seed(3)
    )
    # a 1 x 1000 strip: no box of area >= 50 px and ratio <= 4/3 fits in one row
    assert crop_box(1, 1000, torch.Generator().manual_seed(0)) == (0, 499, 1, 1)


def grey_image() -> torch.Tensor:
    return torch.randint(
        0, 256, (28, 28), generator=torch.Generator().manual_seed(0), dtype=torch.uint8
    )


def test_augmented_view_is_a_function_of_view_and_index():
    image = grey_image()
    v0, v1 = AugmentedView(32, 0), AugmentedView(32, 1)
    a = v0(image, 5)
    assert a.shape == (3, 32, 32) and a.dtype == torch.float32
    assert 0.0 <= float(a.min()) and float(a.max()) <= 1.0
    assert torch.equal(a, AugmentedView(32, 0)(image, 5))  # any process, any time
    assert not torch.equal(a, v1(image, 5))
    assert not torch.equal(a, v0(image, 6))
    assert v0.id != v1.id and "view0" in v0.id and v0.id != ToModelInput(32).id


def test_augmented_view_is_crop_resize_flip_of_the_stored_pixels():
    image = grey_image()
    view = AugmentedView(32, 2)
    gen = view.generator(7)
    top, left, h, w = crop_box(28, 28, gen)
    expected = ToModelInput(32)(image[top : top + h, left : left + w])
    if float(torch.rand((), generator=gen)) < 0.5:
        expected = expected.flip(-1)
    assert torch.equal(view(image, 7), expected)


def test_augmented_view_of_a_file(tmp_path):
    path = tmp_path / "a.png"
    Image.fromarray(grey_image().numpy()).convert("RGB").save(path)
    a = AugmentedView(24, 0)(str(path), 3)
    assert a.shape == (3, 24, 24)
    assert torch.equal(a, AugmentedView(24, 0)(str(path), 3))
    assert not torch.equal(a, AugmentedView(24, 1)(str(path), 3))


def test_epoch_view_cycles_through_views_and_test_view_is_row_zero():
    k, d = 3, 5
    x = torch.arange(1 + k, dtype=torch.float32).view(-1, 1).expand(-1, d)  # (1 + k, d)
    view = EpochView()
    seen = []
    for epoch in range(7):
        view.epoch = epoch
        seen.append(float(view(x)[0]))
    assert seen == [1, 2, 3, 1, 2, 3, 1]
    assert torch.equal(evaluation_view(x), torch.zeros(d))
    plain = torch.randn(d)
    assert view(plain) is plain and evaluation_view(plain) is plain


def fake_extract(calls):
    """features = view index + 1 (eval transform: 0) in every column."""

    def extract(backbone, images, device, *, transform=None, **kwargs):
        view = getattr(transform, "view", -1) + 1
        calls.append(view)
        return torch.full((len(images), backbone.dim), float(view))

    return extract


def test_store_views_are_cached_one_file_each_and_shared(tmp_path, monkeypatch):
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(features, "extract", fake_extract(calls))
    backbone = SimpleNamespace(
        name="fake", weights_digest="0", normalization="none", input_size=8, dim=2, runtime="torch"
    )
    data = SimpleNamespace(
        name="fake",
        fingerprint="f",
        on_disk=False,
        train_x=torch.zeros(3, 8, 8, dtype=torch.uint8),
        test_x=torch.zeros(2, 8, 8, dtype=torch.uint8),
    )
    store = FeatureStore(CPU, progress=False)
    views = store.get_views(backbone, data, 3)
    assert views.shape == (3, 4, 2)
    assert views[0, :, 0].tolist() == [0.0, 1.0, 2.0, 3.0]  # eval, then views 0, 1, 2
    assert sorted(calls) == [0, 1, 2, 3]
    assert len(list(tmp_path.glob("fake/*.npy"))) == 4
    again = FeatureStore(CPU, progress=False)  # a later invocation with fewer views
    assert torch.equal(again.get_views(backbone, data, 2), views[:, :3])
    assert again.hits == 3 and sorted(calls) == [0, 1, 2, 3]


def test_tosca_trains_on_the_epoch_view_and_prototypes_use_the_test_view():
    """Row v of every sample is (class centre + noise + v), so the view a
    mini-batch holds is readable from it; the runner's wiring."""
    k, d, n = 2, 8, 6
    centres = torch.eye(4, d) * 5
    y = torch.arange(4).repeat_interleave(n)
    base = centres[y] + 0.1 * torch.randn(len(y), d, generator=torch.Generator().manual_seed(0))
    x = torch.stack([base + v for v in range(1 + k)], dim=1)  # (N, 1 + k, d)
    view = EpochView()
    stream = build_stream(
        x,
        y,
        base,
        y,
        [0, 1, 2, 3],
        [2, 2],
        test_shuffle=True,
        seed=0,
        train_transform=view,
        eval_transform=evaluation_view,
    )
    seen = []

    class Spy(Recorder):
        def before_forward(self, strategy, **kwargs):
            if strategy.is_training:
                assert strategy.mb_x.shape == (len(strategy.mb_y), d)
                offset = strategy.mb_x - centres[strategy.mb_y]  # view index + noise
                seen.append((strategy.clock.train_exp_epochs, round(float(offset.mean()))))

    params = {
        "flow": "tosca",
        "mlp_ratio": 2,
        "se_ratio": 2,
        "l1": 0.0,
        "epochs": 3,
        "batch_size": 4,
        "optimizer": "sgd",
        "lr": 0.01,
        "momentum": 0.9,
        "weight_decay": 0.0,
        "scheduler": "constant",
        "init": "xavier",
        "selection": "sample",
        "eval_batch_size": 8,
        "augment_views": k,
    }
    torch.manual_seed(0)
    strategy = Tosca(
        params=params,
        backbone=SimpleNamespace(dim=d),
        n_classes=4,
        device=CPU,
        plugins=[Spy(stream.task_of_label, progress=False), ViewClock(view)],
        evaluator=quiet_evaluator(),
    )
    strategy.train(stream.train[0], eval_streams=[])
    assert dict(seen) == {0: 1, 1: 2, 2: 1} and len(seen) == 3 * 3  # 12 samples, batch 4
    model = strategy.model.eval()
    with torch.no_grad():
        task0 = torch.nonzero(y < 2).squeeze(1)
        emb = model.luca[0](base[task0])
        means = torch.stack([emb[y[task0] == c].mean(0) for c in (0, 1)])
    assert torch.allclose(model.classifier.weight[:2], means, atol=1e-5)
    strategy.eval(stream.seen_test[0])  # test features are (dim,): unchanged


def test_augment_views_run_is_recorded_and_reproducible(tmp_path, monkeypatch):
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path / "cache"))  # leave the session's alone
    args = [
        "--methods",
        "tosca",
        "--scenario",
        "synthetic",
        "--no-progress",
        "--set",
        "tosca.epochs=2",
        "--set",
        "tosca.augment_views=2",
    ]
    first = invoke("run", "--out", str(tmp_path / "a"), *args)
    assert first.exit_code == 0, first.output
    second = invoke("run", "--out", str(tmp_path / "b"), *args)
    plain = invoke("run", "--out", str(tmp_path / "c"), *args[:-2])
    a, b, c = (json.loads(next((tmp_path / x).glob("runs/*/*/*.json")).read_text()) for x in "abc")
    assert a["config"]["method"]["augment_views"] == 2
    assert a["protocol"]["settings"]["augment_views"] == 2
    assert c["protocol"]["settings"]["augment_views"] == 0
    assert a["acc_matrix"] == b["acc_matrix"]
    assert b["timing"]["features_from"] == "disk cache"
    assert second.exit_code == 0 and plain.exit_code == 0
    assert a["acc_matrix"] != c["acc_matrix"] or a["forgetting"] != c["forgetting"]
    assert all(math.isfinite(v) for row in a["acc_matrix"] for v in row)


def test_negative_augment_views_is_a_one_paragraph_error(tmp_path):
    result = invoke(
        "run",
        "--out",
        str(tmp_path),
        "--methods",
        "tosca",
        "--scenario",
        "synthetic",
        "--set",
        "tosca.augment_views=-1",
    )
    assert result.exit_code == 2
    assert "tosca.augment_views = -1 is out of range: it must be at least 0" in result.output
    assert "Traceback" not in result.output and not list(tmp_path.glob("runs/*"))
