"""Search spaces: a card's search: block and --space items, checked against the card."""

from __future__ import annotations

import re

import pytest

from cl_bench.cards.catalogue import load_method
from cl_bench.cards.search import Dimension, as_text, card_space, parse_space_item, set_item
from cl_bench.errors import UserError


def test_a_cards_block_is_its_default_space():
    space = card_space(load_method("ewc"))
    assert space == {
        "lr": Dimension("lr", 0.0001, 0.1, log=True),
        "ewc_lambda": Dimension("ewc_lambda", 1.0, 10000.0, log=True),
    }
    assert card_space(load_method("simplecil")) == {}


def test_space_items_take_the_settings_type():
    tosca = load_method("tosca")
    assert parse_space_item(tosca, "lr=1e-4..1e-1:log") == Dimension("lr", 1e-4, 0.1, log=True)
    assert parse_space_item(tosca, "epochs=1..20") == Dimension("epochs", 1, 20, whole=True)
    assert parse_space_item(tosca, "optimizer=sgd|adam") == Dimension(
        "optimizer", values=("sgd", "adam")
    )


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("lrr=0.1..1", 'Did you mean "lr"'),
        ("momentum=0..2", "is not a value tosca.momentum takes"),
        ("lr=0..0.1:log", "a log-scale range must start above 0"),
        ("epochs=1.5..20", "is a whole number; low 1.5 is not"),
        ("lr=0.1..0.01", "low 0.1 must be below high 0.01"),
        ("lr=1e-3..1e-1:ln", '":ln" is not a scale'),
        ("optimizer=sgd", "needs at least two"),
        ("optimizer=sgd|rmsprop", "is not a value tosca.optimizer takes"),
        ("optimizer=0..1", "not a number, so it has no range"),
        ("lr", "is not of the form"),
    ],
)
def test_bad_items_are_refused_with_the_fix(item, needle):
    with pytest.raises(UserError, match=re.escape(needle)):
        parse_space_item(load_method("tosca"), item)


def test_a_chosen_value_round_trips_through_set():
    for value in (0.026938830192854, 1e-05, 7, "adam", True):
        assert set_item("tosca", "x", value) == f"tosca.x={as_text(value)}"
    card = load_method("tosca")
    card.override("lr", as_text(0.026938830192854))
    assert card.params["lr"] == 0.026938830192854
