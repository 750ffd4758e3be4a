"""Card variants: a built-in card copied under another name with keys replaced; a small
suite of SimpleCIL on synthetic for the suite tests."""

from __future__ import annotations

from pathlib import Path

import yaml


def card_variant(tmp_path: Path, folder: Path, base: str, name: str, **keys) -> Path:
    """A folder for --cards holding built-in card ``base`` as ``name`` with ``keys``
    replaced (a card made broken on purpose, or cheaper); returns the folder, which
    further calls on the same ``tmp_path`` add to."""
    raw = yaml.safe_load((folder / f"{base}.yaml").read_text())
    cards = tmp_path / "cards"
    cards.mkdir(exist_ok=True)
    (cards / f"{name}.yaml").write_text(yaml.safe_dump({**raw, "name": name, **keys}))
    return cards


# a suite card of one entry: SimpleCIL on synthetic at 32 px, fp32 (a few seconds)
MINI_SUITE = """\
runs:
  - name: synth
    scenario: synthetic
    backbone: efficientnet_lite0
    image_size: 32
    precision: fp32
    methods: [simplecil]
"""
