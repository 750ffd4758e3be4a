"""The settings space under hostile values: for every method card and every setting
(and the scenario's), a value that is non-finite, zero, negative, huge, tiny, of the
wrong type or one of YAML's own spellings is either refused before anything exists
(exit 2, one paragraph, no file) or gives what a real value gives: a valid record
with finite numbers, or, when the value makes training diverge, a ``.failed`` record
that says so and no result.

Two layers. Here, ``test_every_setting_refuses_or_accepts_a_finite_value`` puts a
fixed set of hostile spellings into every setting of every card through the checks a
run makes before it starts (cheap: no data, no training). The end-to-end layer is
tests/integration/test_settings_property.py.
"""

from __future__ import annotations

import copy

import pytest

from cl_bench.cards.card import non_finite
from cl_bench.cards.catalogue import load_method, load_scenario, method_names
from cl_bench.engine.memory import check_memory
from cl_bench.errors import UserError
from tests.helpers.hostile import (
    BACKBONE,
    CASES,
    SPELLINGS,
    runnable_method,
    set_value,
)


@pytest.fixture(scope="module")
def cards() -> dict:
    """Every method card and the synthetic scenario, loaded once (copied per case)."""
    return {
        "scenario": load_scenario("synthetic"),
        **{name: load_method(name) for name in method_names()},
    }


@pytest.mark.parametrize(("owner", "key"), CASES)
def test_every_setting_refuses_or_accepts_a_finite_value(cards, owner, key):
    """Every hostile spelling is refused with one paragraph by the pre-run checks
    (card rules, backbone checks, memory estimate), or leaves every number finite
    and every rule of the card satisfied."""
    for text in SPELLINGS:
        method = copy.deepcopy(cards[runnable_method(owner)])
        scenario = copy.deepcopy(cards["scenario"])
        target = scenario if owner == "scenario" else method
        item = set_value(key, text)
        try:
            target.override(*item)
            target.check()
            check_memory([method], scenario, BACKBONE, 32, "cpu")
        except UserError as e:
            assert "\n" not in e.paragraph() and e.paragraph(), (item, e)
            continue
        assert non_finite(target.params) == [], item
        assert target.problems() == [], item
