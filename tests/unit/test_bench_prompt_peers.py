"""The harness of figures l2p-against-avalanche and prompts-against-pilot: our side takes
exactly the prompt methods it is written for, and prompts-against-pilot without a
LAMDA-PILOT checkout says what is missing and how to get it instead of failing (the
figures themselves are measured, never asserted)."""

from __future__ import annotations

import pytest

from bench import prompt_shape, prompts_against_pilot


def test_prompt_shape_arguments(capsys):
    assert prompt_shape.arguments(["l2p"]) == ("l2p", "auto", 0)
    assert prompt_shape.arguments(["coda-prompt", "fp32", "8"]) == ("coda-prompt", "fp32", 8)
    for bad, why in (
        ([], "got ''"),
        (["tosca"], "got 'tosca'"),
        (["l2p", "auto", "0", "extra"], "got 'l2p auto 0 extra'"),
        (["l2p", "auto", "-1"], "checkpoint_blocks '-1' is not an integer >= 0"),
        (["l2p", "auto", "x"], "checkpoint_blocks 'x' is not an integer >= 0"),
        (["l2p", "bogus"], 'Unknown precision "bogus"'),
    ):
        with pytest.raises(SystemExit) as stop:
            prompt_shape.arguments(bad)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert why in err and "usage: python -m bench.prompt_shape" in err


def test_prompts_against_pilot_without_a_checkout_names_what_is_missing(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "dualprompt.py").write_text("")
    monkeypatch.setenv("CL_BENCH_PILOT", str(tmp_path))
    out = prompts_against_pilot.main()
    assert set(out) == {"not_measured"}
    message = out["not_measured"]
    assert f"no LAMDA-PILOT checkout at {tmp_path}" in message
    assert (
        "missing models/coda_prompt.py, exps/dualprompt.json, exps/coda_prompt.json, trainer.py"
    ) in message
    assert "bench/parity.md" in message and "$CL_BENCH_PILOT" in message
    assert "(prompts-against-pilot) not measured: " + message in capsys.readouterr().err
