"""The method contract at the CLI: a card whose strategy declares nothing is refused
before anything runs (the contract itself: tests/unit/test_contract.py)."""

from __future__ import annotations

from cl_bench.cards import catalogue
from tests.helpers.cli import ADVICE, invoke

NAIVE = "avalanche.training.supervised.strategy_wrappers:Naive"


def test_cli_refuses_a_card_whose_strategy_declares_nothing(tmp_path, monkeypatch):
    cards = tmp_path / "methods"
    cards.mkdir()
    card = cards / "bare.yaml"
    card.write_text(
        "strategy: avalanche.training.supervised:Naive\n"
        "defaults: {batch_size: 8, eval_batch_size: 8}\n"
    )
    monkeypatch.setattr(catalogue, "METHODS_DIR", cards)
    out = tmp_path / "out"
    result = invoke(
        "run", "--methods", "bare", "--scenario", "synthetic", "--no-progress", "--out", str(out)
    )
    assert result.exit_code == 2
    assert result.stderr == f"error: {card}: strategy {NAIVE} {ADVICE}\n"
    assert not out.exists()
