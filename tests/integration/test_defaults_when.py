"""A card's `defaults_when:` block: defaults that depend on another setting's resolved
value (APER's finetune variant has PILOT's aper_finetune.json settings), applied after
the backbone resolves `auto`, never over an explicit --set, and checked when the card
loads."""

from __future__ import annotations

import pytest

from cl_bench.backbones import load_backbone
from cl_bench.cards import catalogue
from cl_bench.cards.catalogue import load_method
from cl_bench.cards.resolve import resolve_for_backbone
from cl_bench.grid.dry_run import planned_backbone
from tests.helpers.cards import card_variant
from tests.helpers.cli import invoke, refused

ADAPTER = {"adapt": "adapter", "epochs": 20, "batch_size": 48, "weight_decay": 0.0005}
FINETUNE = {"adapt": "finetune", "epochs": 6, "batch_size": 128, "weight_decay": 0.05}
BN = {"adapt": "bn", "epochs": 10, "batch_size": 128, "weight_decay": 0.0005}


def settled(backbone, *sets: tuple[str, str]) -> tuple[dict, dict]:
    card = load_method("aper")
    for key, value in sets:
        card.override(key, value)
    origins = resolve_for_backbone(card, backbone)
    return {k: card.params[k] for k in ADAPTER}, origins


def test_aper_variant_defaults_follow_the_backbone():
    """ViT: the adapter variant and the card's own defaults; CNN: bn (APER w/ BN) with
    the official code's bn settings, each with where it comes from."""
    vit = planned_backbone("vit_tiny_patch16_224", "random", 32)
    assert settled(vit) == (ADAPTER, {"adapt": "vit backbone"})
    cnn = planned_backbone("efficientnet_lite0", "random", 32)
    params, origins = settled(cnn)
    assert params == BN
    assert origins == {"adapt": "cnn backbone", "epochs": "adapt=bn", "batch_size": "adapt=bn"}


def test_explicit_settings_win_over_variant_defaults():
    cnn = planned_backbone("efficientnet_lite0", "random", 32)
    params, origins = settled(
        cnn, ("adapt", "finetune"), ("epochs", "2"), ("weight_decay", "0.001")
    )
    assert params == {**FINETUNE, "epochs": 2, "weight_decay": 0.001}
    assert "epochs" not in origins and origins["batch_size"] == "adapt=finetune"
    vit = planned_backbone("vit_tiny_patch16_224", "random", 32)
    params, _ = settled(vit, ("adapt", "finetune"))
    assert params == FINETUNE  # an explicit variant brings its defaults on a ViT too


def test_resolving_twice_changes_nothing():
    """A grid worker re-resolves the planned card: the same values, so the same path."""
    card = load_method("aper")
    card.override("epochs", "3")
    backbone = load_backbone("efficientnet_lite0", "random", 32)
    resolve_for_backbone(card, backbone)
    once = dict(card.params)
    resolve_for_backbone(card, backbone)
    assert card.params == once and once["epochs"] == 3 and once["batch_size"] == 128
    assert once["adapt"] == "bn"


@pytest.mark.parametrize(
    ("block", "needle"),
    [
        ({"adpt": {"finetune": {"epochs": 6}}}, 'names "adpt", which is not a setting'),
        ({"adapt": {"lora": {"epochs": 6}}}, "adapt=lora is not one of its choices"),
        ({"adapt": {"finetune": {"epoch": 6}}}, 'sets "epoch", which is not a setting'),
        ({"adapt": {"finetune": {"epochs": "six"}}}, "sets epochs='six', not a int"),
        ({"adapt": {"finetune": {"epochs": 0}}}, "aper-x.epochs = 0 is out of range"),
        ({"adapt": {"finetune": {}}}, "adapt=finetune must be a non-empty mapping"),
        ({"adapt": ["finetune"]}, "adapt must map its values to defaults"),
        ({"adapt": {"finetune": {"adapt": "none"}}}, "adapt=finetune sets adapt itself"),
    ],
)
def test_card_with_bad_defaults_when_refused(tmp_path, block, needle):
    cards = card_variant(tmp_path, catalogue.METHODS_DIR, "aper", "aper-x", defaults_when=block)
    refused(
        invoke("list", "methods", "--cards", str(cards)),
        f"{cards / 'aper-x.yaml'}: `defaults_when:`",
    )
    result = invoke(
        "run",
        "--cards",
        str(cards),
        "--methods",
        "aper-x",
        "--scenario",
        "synthetic",
        "--out",
        str(tmp_path / "out"),
    )
    refused(result, needle, tmp_path / "out")
