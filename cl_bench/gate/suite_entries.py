"""The entries of a suite's ``runs:`` list, checked when the suite loads.

An entry's ``sets`` item with top-level commas sweeps, as ``--set owner.key=a,b`` does
on the command line (:mod:`cl_bench.cards.sweep`): ``run --suite`` and ``report
--suite`` run and show one configuration per value; the gate (``check``) refuses it
(:func:`cl_bench.gate.suite.refuse_sweeps`).

Each entry becomes a ``cl-bench run`` request only after the earlier entries ran, so
unchecked, a wrong type there (``seeds: 1993``, ``image_size: "64"``) would be a
traceback after the earlier entries' runs, a string of methods would be read as its
letters, and a misspelt key (``seed:``) would be silently ignored. Here each entry is
checked with the Python API's checks (:mod:`cl_bench.arguments`) and its lists
normalised, before anything runs.
"""

from __future__ import annotations

from pathlib import Path

from cl_bench import arguments
from cl_bench.cards.sweep import expand_sets
from cl_bench.errors import UserError, suggest

ENTRY_KEYS = (
    "name",
    "note",
    "scenario",
    "backbone",
    "weights",
    "image_size",
    "precision",
    "protocol",
    "methods",
    "seeds",
    "sets",
)
OPTIONAL_TEXT = ("note", "scenario", "backbone", "weights", "precision", "protocol")


def check_entries(path: Path, suite: dict) -> None:
    """Refuse a bad ``runs:`` list or entry, naming the file and the entry; turn
    ``methods`` and ``seeds`` into lists (a single name or seed is allowed)."""
    runs = suite.get("runs")
    if not isinstance(runs, list) or not runs:
        raise UserError(f"{path} needs a non-empty `runs:` list of entries.")
    names: set[str] = set()
    for number, entry in enumerate(runs, 1):
        if not isinstance(entry, dict) or "name" not in entry or "methods" not in entry:
            raise UserError(
                f"{path}: every entry of runs: needs a name and methods (entry "
                f"{number} is {entry!r})."
            )
        where = f"{path}, entry {number} of runs: ({entry['name']!r})"
        unknown = sorted(set(map(str, entry)) - set(ENTRY_KEYS))
        if unknown:
            raise UserError(
                f"{where} has the unknown key {unknown[0]!r}."
                f"{suggest(unknown[0], ENTRY_KEYS)} Known keys: "
                f"{', '.join(ENTRY_KEYS)}."
            )
        try:
            arguments.text("name", entry["name"], "name: fmnist-features")
            for key in OPTIONAL_TEXT:
                arguments.text(key, entry.get(key), f"{key}: ...", optional=True)
            arguments.whole("image_size", entry.get("image_size"), "image_size: 64", optional=True)
            expand_sets(arguments.strings("sets", entry.get("sets", []), "sets: [tosca.epochs=2]"))
            entry["methods"] = arguments.methods(entry["methods"])
            entry["seeds"] = arguments.seeds(entry.get("seeds", [1993]))
        except UserError as e:
            raise UserError(f"{where}: {e.paragraph()}") from None
        if entry["name"] in names:
            raise UserError(
                f"{where}: another entry has the same name; the baseline keys "
                "runs by <entry>/<method>, so every entry needs its own name."
            )
        names.add(entry["name"])
    try:
        threads = arguments.whole("threads", suite.get("threads"), "threads: 2", optional=True)
    except UserError as e:
        raise UserError(f"{path}: {e.paragraph()}") from None
    if threads is not None and threads < 1:
        raise UserError(f"{path}: threads: {threads} must be at least 1 (torch threads per run).")
