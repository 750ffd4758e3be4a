"""bench imports cl-bench's public API and the method contract where it can; every
other cl_bench module it imports is a row of "What bench imports of cl-bench" in
bench/README.md, with the files that import it and why (bench.internals compares the two)."""

from __future__ import annotations

from bench import internals


def test_the_internals_bench_uses_are_the_ones_its_readme_lists():
    assert internals.problems() == [], "run python -m bench.internals for the current rows"


def test_the_public_api_and_the_contract_are_not_internals():
    assert not internals.internal("cl_bench")
    assert not internals.internal("cl_bench.api")
    assert not internals.internal("cl_bench.contract.optimizer")
    assert internals.internal("cl_bench.engine.runner")


def test_a_new_or_dropped_import_is_reported():
    text = internals.README.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `cl_bench.text_table`"))
    found = internals.problems(text.replace(row + "\n", ""))
    users = ", ".join(internals.used()["cl_bench.text_table"])
    assert found == [f"cl_bench.text_table is imported by {users} but not listed"]
    extra = "| `cl_bench.metrics` | `run.py` | none |\n"
    found = internals.problems(text.replace(internals.END, extra + internals.END))
    assert found == ["cl_bench.metrics is listed but bench no longer imports it"]
