"""Real-scenario data as researchers have it on disk (PILOT's ImageFolder
layout), `data check`, and ViT weights from local files or the hub."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image

from cl_bench.backbones import load_backbone
from cl_bench.cards.catalogue import load_scenario
from cl_bench.errors import UserError
from cl_bench.scenarios import load_data, scenario_order
from cl_bench.scenarios.image_data import FileList
from cl_bench.scenarios.transforms import FileTransform
from tests.helpers.cli import invoke
from tests.helpers.trees import make_tree

FOLDERS = {
    "cub": "cub",
    "imagenet-r": "imagenet-r",
    "imagenet-a": "imagenet-a",
    "objectnet": "objectnet",
    "omnibenchmark": "omnibenchmark",
    "vtab": "vtab-cil/vtab",
}
PAPER_SPLIT = {
    "cub": (200, 10),
    "imagenet-r": (200, 20),
    "imagenet-a": (200, 20),
    "objectnet": (200, 20),
    "omnibenchmark": (300, 30),
    "vtab": (50, 10),
}


def card_for(name: str, n_classes: int):
    card = load_scenario(name)
    card.override("dataset_args", f"{{n_classes: {n_classes}}}")
    return card


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_paper_scenarios_load_pilot_layout(tmp_path, name):
    classes = ["n02", "n10", "n01", "zebra", "apple"]
    make_tree(tmp_path / FOLDERS[name], classes)
    card = load_scenario(name)
    n, inc = PAPER_SPLIT[name]
    assert (
        card.params["dataset_args"]["n_classes"],
        card.params["init_cls"],
        card.params["increment"],
    ) == (n, inc, inc)
    data = load_data(card_for(name, 5), tmp_path)
    assert isinstance(data.train_x, FileList) and data.on_disk
    # class index = position of the folder name in sorted order, same in both splits
    assert data.class_names == sorted(classes)
    assert data.train_y.tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3 + [4] * 3
    assert data.test_y.tolist() == [0] * 2 + [1] * 2 + [2] * 2 + [3] * 2 + [4] * 2
    for path, y in zip(data.train_x.paths, data.train_y.tolist(), strict=True):
        assert Path(path).parent.name == data.class_names[y]
    assert scenario_order(card, 5, 1993) == np.random.RandomState(1993).permutation(5).tolist()


def test_paper_order_on_full_class_count():
    assert scenario_order(load_scenario("imagenet-a"), 200, 1993)[:5] == [168, 136, 51, 9, 183]
    assert scenario_order(load_scenario("omnibenchmark"), 300, 1993)[:5] == [169, 221, 146, 296, 92]
    assert scenario_order(load_scenario("vtab"), 50, 1993)[:5] == [43, 41, 23, 14, 13]


def test_wrong_class_count(tmp_path):
    make_tree(tmp_path / "imagenet-a", ["a", "b", "c"])
    with pytest.raises(UserError, match="found 3 class folders .* expected 200"):
        load_data(load_scenario("imagenet-a"), tmp_path)


def test_missing_split_and_missing_root(tmp_path):
    make_tree(tmp_path / "cub", ["a", "b"])
    for p in (tmp_path / "cub" / "test").rglob("*"):
        if p.is_file():
            p.unlink()
    for d in sorted((tmp_path / "cub" / "test").rglob("*"), reverse=True):
        d.rmdir()
    (tmp_path / "cub" / "test").rmdir()
    with pytest.raises(UserError, match=r"cub/test not found. Expected .*train/<class>"):
        load_data(card_for("cub", 2), tmp_path)
    with pytest.raises(UserError, match="no data root was given.*CL_BENCH_DATA"):
        load_data(load_scenario("imagenet-r"), None)


def test_empty_class_and_mismatched_classes(tmp_path):
    make_tree(tmp_path / "cub", ["a", "b"])
    (tmp_path / "cub" / "train" / "c").mkdir()
    (tmp_path / "cub" / "test" / "c").mkdir()
    with pytest.raises(UserError, match="class folder.*c in .*hold no images"):
        load_data(card_for("cub", 3), tmp_path)
    (tmp_path / "cub" / "train" / "c").rmdir()
    with pytest.raises(UserError, match="different class folders.*only on one side: c"):
        load_data(card_for("cub", 2), tmp_path)


def test_corrupt_image_stops_with_its_path(tmp_path):
    make_tree(tmp_path / "cub", ["a", "b"])
    bad = tmp_path / "cub" / "train" / "b" / "img1.jpg"
    bad.write_bytes(b"\xff\xd8 truncated")
    data = load_data(card_for("cub", 2), tmp_path)
    with pytest.raises(UserError, match=str(bad)):
        [FileTransform(32, train=False)(p) for p in data.train_x.paths]


def test_paper_transforms():
    img = Image.fromarray(np.zeros((300, 400, 3), dtype=np.uint8))
    test_tf, train_tf = FileTransform(224, train=False), FileTransform(224, train=True)
    assert test_tf.id == "resize256-bicubic-crop224"
    assert tuple(test_tf.pipeline(img).shape) == (3, 224, 224)
    assert tuple(train_tf.pipeline(img).shape) == (3, 224, 224)
    assert train_tf.id == "rrc224-scale0.05-flip-sampleseed"


def test_data_check_good_and_bad(tmp_path):
    make_tree(tmp_path / "mine", ["a", "b"])
    good = invoke(
        "data",
        "check",
        "--scenario",
        "imagefolder",
        "--data-root",
        str(tmp_path / "mine"),
        "--no-progress",
    )
    assert good.exit_code == 0, good.output
    assert "train    2 classes       6 images  ok" in good.stdout
    assert "all 10 images decode" in good.stdout
    (tmp_path / "mine" / "test" / "b" / "img0.jpg").write_text("not a jpeg")
    bad = invoke(
        "data",
        "check",
        "--scenario",
        "imagefolder",
        "--data-root",
        str(tmp_path / "mine"),
        "--no-progress",
    )
    assert bad.exit_code == 1
    assert "1 unreadable file(s):" in bad.stdout and "test/b/img0.jpg" in bad.stdout
    make_tree(tmp_path / "imagenet-a", ["a", "b"])
    count = invoke(
        "data", "check", "--scenario", "imagenet-a", "--data-root", str(tmp_path), "--no-progress"
    )
    assert count.exit_code == 1
    assert "PROBLEM: expected 200 classes; expected 5981 images" in count.stdout
    missing = invoke(
        "data", "check", "--scenario", "imagenet-a", "--data-root", str(tmp_path / "none")
    )
    assert missing.exit_code == 2
    assert "imagenet-a/train/<class>" in missing.stderr and "LAMDA-PILOT" in missing.stderr


def test_run_on_a_fixture_tree(tmp_path):
    make_tree(tmp_path / "imagenet-a", ["a", "b", "c", "d"])
    out = tmp_path / "out"
    result = invoke(
        "run",
        "--scenario",
        "imagenet-a",
        "--data-root",
        str(tmp_path),
        "--backbone",
        "vit_tiny_patch16_224",
        "--weights",
        "random",
        "--image-size",
        "32",
        "--out",
        str(out),
        "--no-progress",
        "--set",
        "scenario.dataset_args={n_classes: 4}",
        "--set",
        "scenario.init_cls=2",
        "--set",
        "scenario.increment=2",
        "--set",
        "tosca.epochs=1",
    )
    assert result.exit_code == 0, result.output
    rec = json.loads(next(out.glob("runs/imagenet-a/tosca/*.json")).read_text())
    assert rec["config"]["transform"] == {
        "train": "rrc32-scale0.05-flip-sampleseed",
        "eval": "resize37-bicubic-crop32",
    }
    assert rec["config"]["backbone"]["weights"] == "random"
    assert sorted(c for t in rec["tasks"] for c in t) == [0, 1, 2, 3]


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_local_weights_reproduce_the_model(tmp_path, suffix):
    torch.manual_seed(0)
    ref = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0).eval()
    path = tmp_path / f"w{suffix}"
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(ref.state_dict(), str(path))
    else:
        torch.save(ref.state_dict(), path)
    bb = load_backbone("vit_tiny_patch16_224", str(path))
    x = torch.rand(2, 3, 224, 224)
    with torch.no_grad():
        expected = ref.forward_head(ref.forward_features(x), pre_logits=True)
    assert torch.equal(bb.features(x), expected)
    assert bb.weights == str(path.resolve()) and len(bb.weights_digest) == 16


def test_weights_of_another_architecture_are_refused(tmp_path):
    other = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=0)
    path = tmp_path / "small.pth"
    torch.save(other.state_dict(), path)
    with pytest.raises(UserError, match=r"does not fit this backbone \(wrong shapes: "):
        load_backbone("vit_tiny_patch16_224", str(path))


def test_offline_without_cache_names_tag_cache_and_alternative(monkeypatch, tmp_path):
    from cl_bench.backbones import vit

    monkeypatch.setattr(vit, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UserError) as e:
        load_backbone("vit_base_patch16_224_in1k")
    msg = str(e.value)
    assert "vit_base_patch16_224.augreg2_in21k_ft_in1k" in msg
    assert str(tmp_path) in msg and "--weights FILE" in msg


def test_random_weights_are_the_same_network_every_time():
    a = load_backbone("vit_tiny_patch16_224", "random", 32)
    torch.manual_seed(123)  # the caller's RNG state does not matter ...
    b = load_backbone("vit_tiny_patch16_224", "random", 32)
    assert all(
        torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True)
    )
    assert a.weights_digest == "random-seed0"
    after = torch.rand(1)
    torch.manual_seed(123)
    assert torch.equal(after, torch.rand(1))  # ... and is left untouched
