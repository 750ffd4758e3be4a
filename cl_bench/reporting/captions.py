"""What a table or figure of ``cl-bench report`` says about its runs besides the numbers:
method titles instead of card names, the backbone and its weights (random weights
flagged), and the settings every row shares that differ from the card defaults.

A paper table read on its own must say what it measured; these pieces go into every
table caption (LaTeX, Markdown, HTML) and every figure title and caption.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import pandas as pd

from cl_bench.errors import UserError

RANDOM_FLAG = "RANDOM WEIGHTS, not pretrained"
# settings that name or locate things rather than choose how a method runs
IGNORED = {"name", "data_root", "root"}

Defaults = Callable[[str, str], dict | None]


@cache
def card_defaults(kind: str, name: str) -> dict | None:
    """The default settings of a method or scenario card (None: no such card here)."""
    from cl_bench.cards.catalogue import load_method, load_scenario

    try:
        card = (load_method if kind == "method" else load_scenario)(name)
    except UserError:
        return None
    return dict(card.params)


@cache
def method_title(method: str) -> str:
    """The card's ``title`` (TOSCA, CODA-Prompt); the name where no card is found."""
    from cl_bench.cards.catalogue import load_method

    try:
        return load_method(method).title
    except UserError:
        return method


def titled(label: str, method: str, title: Callable[[str], str] = method_title) -> str:
    """A row label with its method's title in place of its name:
    'tosca (selection=sample)' -> 'TOSCA (selection=sample)'."""
    return title(method) + label[len(method) :] if label.startswith(method) else label


def weights_text(backbone: str, weights: str) -> str:
    """'efficientnet_lite0, pretrained weights'; random weights flagged."""
    if weights == "random":
        return f"{backbone}, {RANDOM_FLAG}"
    return f"{backbone}, {weights} weights"


def backbone_text(runs: pd.DataFrame) -> str:
    """Every backbone of ``runs`` with its weights, e.g. 'backbone: vit_tiny_patch16_224,
    RANDOM WEIGHTS, not pretrained'; several are listed one after the other."""
    pairs = runs[["backbone", "weights"]].drop_duplicates().sort_values(["backbone", "weights"])
    named = [weights_text(b, w) for b, w in pairs.itertuples(index=False)]
    return ("backbone: " if len(named) == 1 else "backbones: ") + "; ".join(named)


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def shared_settings(runs: pd.DataFrame, defaults: Defaults = card_defaults) -> list[str]:
    """Settings (``method.*`` and ``scenario.*`` of the resolved configs) with one value
    on every run of ``runs`` that has the setting, differing from a card default of those
    runs, as 'epochs=3' or 'scenario.increment=5'; 'epochs=3 (where set)' when some rows'
    methods have no such setting. A setting no card of the runs declares is left out (it
    names data, not a choice)."""
    configs = runs.drop_duplicates("config")
    flat = configs["flat_config"].tolist()
    owners = {
        "method": sorted(set(configs["method"])),
        "scenario": sorted(set(configs["scenario"])),
    }
    found = []
    for key in sorted({k for c in flat for k in c}):
        kind, _, short = key.partition(".")
        if kind not in owners or short in IGNORED or "." in short:
            continue
        having = [c[key] for c in flat if key in c]
        if len({repr(v) for v in having}) != 1 or 1 == len(having) < len(flat):
            continue
        cards = [defaults(kind, name) for name in owners[kind]]
        declared = [card[short] for card in cards if card is not None and short in card]
        if declared and any(repr(d) != repr(having[0]) for d in declared):
            name = short if kind == "method" else key
            where = "" if len(having) == len(flat) else " (where set)"
            found.append(f"{name}={_shown(having[0])}{where}")
    return found


@dataclass(frozen=True)
class Context:
    """What one scenario's table and figures say about their runs."""

    scenario: str
    backbone: str  # backbone_text
    random: bool  # a run of the table has random backbone weights
    shared: list[str] = field(default_factory=list)  # shared_settings

    @property
    def settings_text(self) -> str:
        """'shared settings other than the card defaults: epochs=3' or ''."""
        if not self.shared:
            return ""
        return "settings of every row other than the card defaults: " + ", ".join(self.shared)

    @property
    def caption(self) -> str:
        """'backbone: ...; settings of every row other than the card defaults: ...'."""
        return "; ".join(part for part in (self.backbone, self.settings_text) if part)

    @property
    def sentence(self) -> str:
        """The caption as a sentence: capitalised, with a full stop."""
        return self.caption[:1].upper() + self.caption[1:] + "."

    @property
    def figure_title(self) -> str:
        """The scenario and its backbone, as a figure's title starts."""
        return f"{self.scenario} ({self.backbone.split(': ', 1)[1]})"


def context(runs: pd.DataFrame, defaults: Defaults = card_defaults) -> Context:
    """The context of one scenario's runs."""
    return Context(
        scenario=str(runs["scenario"].iloc[0]),
        backbone=backbone_text(runs),
        random=bool((runs["weights"] == "random").any()),
        shared=shared_settings(runs, defaults),
    )
