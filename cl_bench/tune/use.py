"""The settings a finished search chose, as ``--set`` items for ``cl-bench run --tuned``
(on the scenario searched) or ``--tuned-on SCENARIO`` (the cross-scenario protocol of
Cha & Cho, "Hyperparameters in Continual Learning: A Reality Check", arXiv 2403.09066:
tune on one scenario, evaluate on another). The run records where its settings came
from (``config.tuned``: the scenario searched and the study), so a tuned run is a result
of its own, marked in reports, even when its values equal a hand-set run's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cl_bench.cards.search import set_item
from cl_bench.errors import UserError
from cl_bench.tune.record import records_of

if TYPE_CHECKING:
    from cl_bench.engine.runner import RunRequest


@dataclass(frozen=True)
class Tuned:
    """A method's chosen settings: ``sets`` (``--set`` items) and ``provenance`` (what
    its runs record as ``config.tuned``)."""

    sets: list[str]
    provenance: dict[str, Any]
    line: str  # what the command prints about it


def tuned_settings(folder: Path, method: str, scenario: str) -> Tuned:
    """The best trial of the newest finished search of ``method`` on ``scenario`` under
    ``folder``; refused, naming the command to run, when there is none."""
    found = records_of(folder, scenario, method)
    done = [(p, r) for p, r in found if finished(r) and r["best"] is not None]
    if not done:
        left = f" ({len(found)} unfinished: run its tune command again)" if found else ""
        raise UserError(
            f"no finished search of {method} on {scenario} in {folder}{left}: run `cl-bench "
            f"tune --method {method} --scenario {scenario}` first, or name where its record "
            "is with --tuned-from."
        )
    path, record = done[0]
    best = record["best"]
    chosen = ", ".join(f"{k}={v}" for k, v in best["params"].items())
    return Tuned(
        sets=[set_item(method, k, v) for k, v in best["params"].items()],
        provenance={"on": scenario, "study": record["study"]},
        line=(
            f"{method}: tuned on {scenario} ({chosen}; trial {best['number']} of "
            f"{len(record['trials'])}, validation {record['objective']} "
            f"{best['value']:.2f}; {path.parent})"
        ),
    )


def finished(record: dict[str, Any]) -> bool:
    ended = [t for t in record["trials"] if t["state"] in ("complete", "failed")]
    return len(ended) >= record["trials_wanted"]


def refuse_overlap(tuned: Tuned, sets: list[str]) -> None:
    """A ``--set`` of a tuned setting would silently replace the chosen value."""
    chosen = {item.partition("=")[0] for item in tuned.sets}
    for item in sets:
        head = item.partition("=")[0].strip()
        if head in chosen:
            raise UserError(
                f'--set "{item}" replaces a setting the search chose ({head}); drop the --set '
                "to run the tuned settings, or drop --tuned to run your own."
            )


def apply_tuned(
    requests: list[RunRequest], tuned_from: str | Path = "results/tune", on: str | None = None
) -> list[str]:
    """Give each request's methods the settings their finished search chose (on the
    request's own scenario, or on ``on``), in place; the lines that say so. A method whose
    card declares no search space runs as it is (said so); one with a space but no
    finished search is refused, naming the command that makes one."""
    from cl_bench.cards.catalogue import load_method
    from cl_bench.cards.search import card_space

    folder = Path(tuned_from)
    lines: list[str] = []
    for req in requests:
        for method in req.methods:
            if not card_space(load_method(method)):
                lines.append(f"{method}: nothing to tune (its card has no search: block)")
                continue
            found = tuned_settings(folder, method, on or req.scenario)
            refuse_overlap(found, req.sets)
            req.sets = [*found.sets, *req.sets]
            req.tuned[method] = found.provenance
            lines.append(found.line)
    return list(dict.fromkeys(lines))
