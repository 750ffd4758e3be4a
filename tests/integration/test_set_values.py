"""Settings of more than one kind of value (a card's ``types:``): a class order given
as a list on the command line runs in that order, and is still checked (every class
once, in range); null for EWC's importance bound means no bound; a second ``--set``
of such a setting is read as the first; a malformed ``types:`` is refused when the
card loads."""

from __future__ import annotations

import json

import pytest

from cl_bench.cards import catalogue
from cl_bench.cards.catalogue import load_method, load_scenario
from cl_bench.errors import UserError
from tests.helpers.cli import invoke, refused

SYN = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32"]
REVERSED = list(range(9, -1, -1))  # synthetic has 10 classes, 5 tasks of 2


def test_a_class_order_list_from_the_command_line_runs_in_that_order(tmp_path):
    out = tmp_path / "out"
    result = invoke(
        "run",
        "--out",
        str(out),
        *SYN,
        "--methods",
        "simplecil",
        "--set",
        f"scenario.class_order={json.dumps(REVERSED)}",
    )
    assert result.exit_code == 0, result.output
    record = json.loads(next(out.glob("runs/synthetic/simplecil/*.json")).read_text())
    assert record["config"]["scenario"]["class_order"] == REVERSED
    assert record["class_order"] == REVERSED
    assert record["tasks"] == [[9, 8], [7, 6], [5, 4], [3, 2], [1, 0]]


@pytest.mark.parametrize(
    ("order", "needle"),
    [
        ("[1,0]", "The explicit class order [1, 0] is not a permutation of 0..9"),
        ("[0,0,1,2,3,4,5,6,7,8]", "is not a permutation of 0..9. List every class id"),
        ("[1,2,3,4,5,6,7,8,9,10]", "is not a permutation of 0..9"),
        ("[a,b]", "class_order ['a', 'b'] is none of \"seed\""),
        ("[true,false]", 'class_order [True, False] is none of "seed"'),
        ("sorted", "class_order 'sorted' is none of \"seed\""),
    ],
)
def test_a_bad_class_order_is_one_paragraph_before_anything_runs(tmp_path, order, needle):
    out = tmp_path / "out"
    refused(
        invoke(
            "run",
            "--out",
            str(out),
            *SYN,
            "--methods",
            "simplecil",
            "--set",
            f"scenario.class_order={order}",
        ),
        needle,
        out,
    )


def test_a_class_order_set_twice_is_read_as_the_card_default_is():
    card = load_scenario("synthetic")
    card.override("class_order", "[1, 0]")
    assert card.params["class_order"] == [1, 0]
    card.override("class_order", "natural")  # text again, after a list
    assert card.params["class_order"] == "natural"
    card.override("class_order", "[0, 1]")
    assert card.params["class_order"] == [0, 1]


def test_null_importance_bound_is_no_bound_and_numbers_still_parse():
    card = load_method("ewc")
    card.override("importance_max", "null")
    assert card.params["importance_max"] is None
    card.override("importance_max", "1e30")  # YAML 1.1 text, read as a number as before
    assert card.params["importance_max"] == 1e30
    with pytest.raises(
        UserError,
        match=r"expected a float like the default \(0.0001\) or "
        r"another kind its card's `types:` names \(number, "
        r"null\), got 'none'",
    ):
        card.override("importance_max", "none")
    with pytest.raises(UserError, match="ewc.importance_max = 0.0 is out of range"):
        card.override("importance_max", "0")


def test_a_null_importance_bound_plans_a_run(tmp_path):
    result = invoke(
        "run",
        "--out",
        str(tmp_path / "out"),
        *SYN,
        "--methods",
        "ewc",
        "--set",
        "ewc.importance_max=null",
        "--dry-run",
    )
    assert result.exit_code == 0, result.output
    assert "1 runs planned: 0 done, 1 pending" in result.stdout


@pytest.mark.parametrize(
    ("types", "needle"),
    [
        ("types: {batch_size: [float]}\n", "types of batch_size must be a list of the kinds"),
        ("types: {batch_size: []}\n", "types of batch_size must be a list of the kinds"),
        ("types: [batch_size]\n", "`types:` must be a mapping"),
        ("types: {batchsize: [integer, null]}\n", "its rules name batchsize"),
    ],
)
def test_a_malformed_types_rule_is_refused_when_the_card_loads(
    tmp_path, monkeypatch, types, needle
):
    cards = tmp_path / "methods"
    cards.mkdir()
    (cards / "broken.yaml").write_text(
        "strategy: cl_bench.strategies.simplecil:SimpleCIL\n"
        "defaults: {batch_size: 8, eval_batch_size: 8}\n" + types
    )
    monkeypatch.setattr(catalogue, "METHODS_DIR", cards)
    out = tmp_path / "out"
    result = invoke("run", "--methods", "broken", "--out", str(out), *SYN)
    refused(result, needle, out)
