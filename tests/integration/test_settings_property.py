"""The settings space under hostile values: for every method card and every setting
(and the scenario's), a value that is non-finite, zero, negative, huge, tiny, of the
wrong type or one of YAML's own spellings is either refused before anything exists
(exit 2, one paragraph, no file) or gives what a real value gives: a valid record
with finite numbers, or, when the value makes training diverge, a ``.failed`` record
that says so and no result.

Two layers. ``test_every_setting_refuses_or_accepts_a_finite_value``
(tests/unit/test_settings_property.py) puts a fixed set of hostile spellings into every
setting of every card through the checks a run makes before it starts (cheap: no data,
no training). Here, ``test_hostile_settings_end_to_end`` lets hypothesis draw
(setting, value) pairs, numeric settings twice as often (where a hostile value is most
often accepted), and runs ``cl-bench run`` on a tiny synthetic stream (4 classes, 2
tasks, ViT-Tiny with random weights at 32 px) with one epoch, so accepted values are
run for real; its examples are bounded and derandomized, with no shrinking, so CI runs
the same cases every time.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from cl_bench.cards.card import is_number
from cl_bench.cards.catalogue import load_method
from cl_bench.store import results
from tests.helpers.cli import invoke
from tests.helpers.hostile import (
    BACKBONE,
    CASES,
    SPELLINGS,
    runnable_method,
    set_value,
)

VIT = ["--backbone", BACKBONE, "--weights", "random", "--image-size", "32"]
TINY = "scenario.dataset_args={n_classes: 4, train_per_class: 4, test_per_class: 2}"
DIVERGED = ("diverged", "non-finite", "NaN or inf")  # words of a divergence's failure


NUMERIC = [
    (owner, key)
    for owner, key in CASES
    if owner == "scenario" or is_number(load_method(owner).params[key])
]  # where a hostile value is most often accepted


def hostile_text() -> st.SearchStrategy[str]:
    """Hostile values as a user would type them: the fixed spellings, any float
    (inf and nan included) as Python writes it, and integers at or below zero or far
    above any sane setting."""
    return st.one_of(
        st.sampled_from(SPELLINGS),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.integers(max_value=0).map(str),
        st.integers(min_value=10**9).map(str),
    )


def check_outcome(result, out: Path, item: str) -> None:
    """Refused before any file exists; or finished with valid, finite records; or
    failed as a diverged run (a .failed record, no result)."""
    assert "Traceback" not in result.output, (item, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        item,
        repr(result.exception),
    )  # CliRunner keeps a bug's exception out of the output
    if result.exit_code == 2:
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, item
        assert not out.exists() or list(out.rglob("*")) == [], item
        return
    found = sorted(out.glob("runs/*/*/*.json"))
    if result.exit_code == 0:
        assert found, (item, result.output)
        for path in found:
            assert results.load_valid(path)["status"] == "done", item
        return
    assert result.exit_code == 1 and "FAILED" in result.stdout, (item, result.output)
    assert found == [], item
    failures = [json.loads(p.read_text()) for p in out.glob("runs/*/*/*.json.failed")]
    assert failures, item
    assert all(any(word in f["error"]["message"] for word in DIVERGED) for f in failures), (
        item,
        failures,
    )


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=st.one_of(st.sampled_from(NUMERIC), st.sampled_from(CASES)), text=hostile_text())
def test_hostile_settings_end_to_end(case, text):
    owner, key = case
    method = runnable_method(owner)
    item = "{}.{}={}".format(owner, *set_value(key, text))
    epochs = ["--set", f"{method}.epochs=1"] if "epochs" in load_method(method).params else []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        result = invoke(
            "run",
            "--out",
            str(out),
            "--scenario",
            "synthetic",
            "--no-progress",
            "--precision",
            "fp32",
            *VIT,
            "--methods",
            method,
            "--set",
            TINY,
            *epochs,
            "--set",
            item,
        )
        check_outcome(result, out, item)
        event(
            {0: "ran: valid record", 1: "diverged: .failed record", 2: "refused before running"}[
                result.exit_code
            ]
        )  # --hypothesis-show-statistics
