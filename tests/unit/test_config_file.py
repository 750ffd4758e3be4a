"""Config files (``--config run.yaml``, ``cl_bench.api.load_config``): keys checked,
lists normalised, unknown keys refused with the known ones named."""

from __future__ import annotations

from pathlib import Path

import pytest

from cl_bench.api import config_digest, config_options, load_config
from cl_bench.errors import UserError

GRID = """\
name: lr sweep
methods: tosca, simplecil
scenarios: [synthetic, fmnist]
seeds: 1993
sets:
  - tosca.lr=0.01,0.05
  - 'scenario.dataset_args={train_per_class: 6}'
precision: fp32
image_size: 32
out: results/lr
launcher: local
jobs: 2
wait: false
"""


def test_a_config_file_gives_run_options_by_their_parameter_names(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(GRID)
    assert config_options(path) == {
        "methods": ["tosca", "simplecil"],
        "scenario": ["synthetic", "fmnist"],
        "seeds": [1993],
        "sets": ["tosca.lr=0.01,0.05", "scenario.dataset_args={train_per_class: 6}"],
        "precision": "fp32",
        "image_size": 32,
        "out": Path("results/lr"),
        "launcher": "local",
        "jobs": 2,
        "wait": False,
    }
    assert len(config_digest(path)) == 12


def test_load_config_gives_keyword_arguments_of_run_grid(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(GRID)
    found = load_config(path)
    assert found["settings"] == {
        "tosca.lr": "0.01,0.05",
        "scenario.dataset_args": "{train_per_class: 6}",
    }
    assert "sets" not in found and found["seeds"] == [1993]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "methds: [tosca]\n",
            "unknown key 'methds'. Did you mean \"methods\"? Known keys: methods",
        ),
        ("seeds: [1993, x]\n", "`seeds: [1993, 'x']` must be an integer or a list of them"),
        ("image_size: big\n", "`image_size: 'big'` must be a whole number"),
        ("download: 1\n", "`download: 1` must be true or false"),
        ("- tosca\n", "must be a mapping of run options"),
        ("scenario: a\nscenarios: b\n", "gives scenario twice"),
        ("methods: [tosca\n", "is not valid YAML"),
    ],
)
def test_a_bad_config_file_is_one_paragraph(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=None) as caught:
        config_options(path)
    assert needle in caught.value.paragraph()


def test_a_missing_config_file_says_what_it_should_hold(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        config_options(tmp_path / "nope.yaml")
