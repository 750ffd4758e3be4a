"""Card files are parsed once per text (cl_bench/cards/places.py): an edited file is read
anew, what a caller changes in what it got never reaches the next reader, and a broken
file gives PyYAML's own message with its line and column, as before the parse was kept."""

from __future__ import annotations

import pytest
import yaml

from cl_bench.cards import places
from cl_bench.errors import UserError


def test_an_edited_file_is_parsed_again(tmp_path):
    card = tmp_path / "m.yaml"
    card.write_text("name: m\ndefaults:\n  lr: 0.1\n")
    assert places.read_yaml(card) == {"name": "m", "defaults": {"lr": 0.1}}
    card.write_text("name: m\ndefaults:\n  lr: 0.2\n")  # same size, maybe the same mtime
    assert places.read_yaml(card) == {"name": "m", "defaults": {"lr": 0.2}}


def test_each_reader_gets_its_own_copy(tmp_path):
    card = tmp_path / "m.yaml"
    card.write_text("name: m\ndefaults:\n  layers: [0, 1]\n")
    first = places.read_yaml(card)
    first["defaults"]["layers"].append(2)
    first["name"] = "changed"
    assert places.read_yaml(card) == {"name": "m", "defaults": {"layers": [0, 1]}}


def test_same_values_as_pyyaml_for_every_built_in_card():
    for path in sorted(places.METHODS_DIR.glob("*.yaml")) + sorted(
        places.BENCHMARKS_DIR.glob("*.yaml")
    ):
        assert places.read_yaml(path) == yaml.safe_load(path.read_text()), path


def test_a_broken_file_keeps_pyyaml_s_message(tmp_path):
    card = tmp_path / "bad.yaml"
    card.write_text("name: m\ndefaults: {lr: 0.1\n")
    with pytest.raises(yaml.YAMLError) as expected:
        yaml.safe_load(card.read_text())
    mark = expected.value.problem_mark
    with pytest.raises(UserError) as got:
        places.read_yaml(card)
    assert (
        f"{card} is not valid YAML at line {mark.line + 1}, column {mark.column + 1}: "
        f"{expected.value.problem}. Fix the file"
    ) in str(got.value)
