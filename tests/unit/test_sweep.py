"""Sweeps: ``--set owner.key=a,b`` split at top-level commas only, expanded into the
cartesian product of the swept values; the API's ``cl_bench.sweep`` marker."""

from __future__ import annotations

import pytest

import cl_bench
from cl_bench.api import settings_as_sets
from cl_bench.api.config_file import merge_options
from cl_bench.cards.sweep import expand_sets, split_values, swept_items
from cl_bench.errors import UserError


@pytest.mark.parametrize(
    ("item", "values"),
    [
        ("tosca.lr=0.01,0.05", ["0.01", "0.05"]),
        ("tosca.lr=0.01", ["0.01"]),
        ("scenario.class_order=[1,2,3]", ["[1,2,3]"]),
        ("scenario.dataset_args={train_per_class: 6, size: 8}", ["{train_per_class: 6, size: 8}"]),
        ("scenario.class_order=[1,0],[0,1]", ["[1,0]", "[0,1]"]),
        ("x.y={a: [1, 2]},{a: [3]}", ["{a: [1, 2]}", "{a: [3]}"]),
        ('x.y="a,b",c', ['"a,b"', "c"]),
        ("x.y='a,b'", ["'a,b'"]),
        ("tosca.selection=sample, batch", ["sample", "batch"]),
    ],
)
def test_a_value_splits_at_its_top_level_commas_only(item, values):
    assert split_values(item) == values


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("tosca.lr=0.01,", "an empty value between its commas"),
        ("tosca.lr=0.01,,0.05", "an empty value between its commas"),
        ("scenario.class_order=[1,2", "unclosed bracket, brace or quote"),
        ("scenario.class_order=[1,2}", "unclosed bracket, brace or quote"),
        ('x.y="a,b', "unclosed bracket, brace or quote"),
    ],
)
def test_a_malformed_sweep_is_one_paragraph(item, needle):
    with pytest.raises(UserError, match=needle):
        split_values(item)


def test_swept_settings_expand_to_their_cartesian_product_first_varying_slowest():
    items = ["tosca.lr=0.01,0.05", "scenario.increment=2", "tosca.epochs=1,2,3"]
    combos = expand_sets(items)
    assert len(combos) == 6
    assert combos[0] == ["tosca.lr=0.01", "scenario.increment=2", "tosca.epochs=1"]
    assert combos[2] == ["tosca.lr=0.01", "scenario.increment=2", "tosca.epochs=3"]
    assert combos[5] == ["tosca.lr=0.05", "scenario.increment=2", "tosca.epochs=3"]
    assert swept_items(items) == ["tosca.lr", "tosca.epochs"]


def test_sets_without_a_sweep_are_one_configuration_unchanged():
    items = ["scenario.class_order=[1,2,3]", "tosca.lr=0.01"]
    assert expand_sets(items) == [items]
    assert expand_sets([]) == [[]]
    assert swept_items(items) == []


@pytest.mark.parametrize(
    ("items", "needle"),
    [
        (["tosca.lr=0.01,0.05", "tosca.lr=0.1,0.2"], "sweeps tosca.lr a second time"),
        (["tosca.lr=0.01,0.01"], "names a value twice"),
    ],
)
def test_a_setting_swept_twice_is_refused(items, needle):
    with pytest.raises(UserError, match=needle):
        expand_sets(items)


def test_the_api_sweeps_only_what_sweep_marks():
    sets = settings_as_sets(
        {
            "tosca.lr": cl_bench.sweep([0.01, 0.05]),
            "scenario.class_order": [1, 0],
            "tosca.selection": cl_bench.sweep(["sample", "a,b"]),
        }
    )
    assert sets == [
        "tosca.lr=0.01,0.05",
        "scenario.class_order=[1, 0]",
        'tosca.selection=sample,"a,b"',
    ]
    assert [len(split_values(s)) for s in sets] == [2, 1, 2]


@pytest.mark.parametrize("values", [[0.01], "0.01,0.05", 3])
def test_a_sweep_needs_a_list_of_two_values_or_more(values):
    with pytest.raises(UserError, match="sweep"):
        cl_bench.sweep(values)


def test_a_command_line_set_replaces_the_files_items_for_its_setting_only():
    merged = merge_options(
        {"sets": ["tosca.lr=0.1"], "seeds": "7"},
        {"sets": None, "seeds": "1993", "out": "results"},
        {"sets": ["tosca.lr=0.01,0.05", "tosca.epochs=2"], "seeds": [1, 2], "out": "elsewhere"},
    )
    assert merged == {"sets": ["tosca.epochs=2", "tosca.lr=0.1"], "seeds": "7", "out": "elsewhere"}
