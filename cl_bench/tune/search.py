"""``cl-bench tune``: a hyper-parameter search with Optuna that never reads the test split.

Every trial is an ordinary run (one per seed) with ``validation`` set: the run trains on
the training images left after a seeded, stratified share of each class is held out,
and is scored on that share (:mod:`cl_bench.scenarios.validation`); the objective is
the trial's validation accuracy (``avg`` or ``last``, the mean over its seeds). The
runs are result files under ``<study>/runs/``, made by the launchers every run uses (in
this process, local workers, SLURM), so a trial whose settings come again is read, not
run, and an interrupted search resumes: the same command reopens the study (Optuna's
journal, ``<study>/journal.log``), runs again the trials it left unfinished (their
finished runs are read back) and goes on to the number of trials asked for.

A study is one folder, ``<out>/<scenario>/<method>/<study>/``, named by a digest of
everything that makes its scores comparable: method, scenario, data, the method's code,
seeds, space, objective, validation share, fixed settings, backbone, weights, image size,
precision and protocol. Changing any of them starts another study.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cl_bench.cards.card import Card
from cl_bench.cards.search import Dimension, card_space, parse_space_item, set_item
from cl_bench.cards.strategy import strategy_of
from cl_bench.engine.runner import RunRequest, check_request, run_data
from cl_bench.errors import UserError
from cl_bench.source_identity import code_block
from cl_bench.store.records import Result
from cl_bench.tune.record import OBJECTIVES, SCHEMA, best_trial, write_record

Echo = Callable[[str], None]


@dataclass
class TuneRequest:
    """One search: ``base`` is the run every trial makes (one method, one scenario, its
    seeds, fixed ``sets``, ``validation`` > 0); ``space`` the ``--space`` items that
    replace the card's ``search:`` entries; ``trials`` the number of finished trials
    wanted; ``batch`` how many trials run at once (a launcher's workers)."""

    base: RunRequest
    trials: int = 20
    space: list[str] = field(default_factory=list)
    objective: str = "avg"
    sampler_seed: int = 0
    batch: int = 1


def check_tune(req: TuneRequest) -> tuple[Card, dict[str, Dimension]]:
    """The method's card and the search space, checked before anything loads."""
    base = req.base
    if len(base.methods) != 1:
        raise UserError(
            f"cl-bench tune searches one method at a time, not {len(base.methods)} "
            f"({', '.join(base.methods)}); run one search per method."
        )
    if base.validation <= 0:
        raise UserError(
            "cl-bench tune needs a validation split (--validation above 0, e.g. 0.1): a "
            "search scored on the test set would leak it into the chosen settings."
        )
    if req.objective not in OBJECTIVES:
        raise UserError(
            f"--objective {req.objective!r} is not one of {', '.join(OBJECTIVES)}: avg "
            "(average accuracy over tasks) or last (accuracy after the last task)."
        )
    if req.trials < 1:
        raise UserError(f"--trials {req.trials}: give at least one trial, e.g. --trials 20.")
    cards, _ = check_request(base)
    card = cards[0]
    space = card_space(card)
    for item in req.space:
        owner, dot, rest = item.partition(".")
        if owner != card.name or not dot:
            raise UserError(
                f'--space "{item}" must name a setting of {card.name}, the method searched, '
                f"as {card.name}.key=range or values, e.g. --space {card.name}.lr=1e-4..1e-1:log."
            )
        dim = parse_space_item(card, rest)
        space[dim.key] = dim
    if not space:
        raise UserError(
            f"{card.name} has no search space: its card has no `search:` block; give one "
            f"with --space, e.g. --space {card.name}.lr=1e-4..1e-1:log."
        )
    fixed = {s.partition("=")[0].strip() for s in base.sets}
    both = sorted(k for k in space if f"{card.name}.{k}" in fixed)
    if both:
        raise UserError(
            f"{card.name}.{both[0]} is both searched and fixed by --set; drop the --set, "
            f"or take it out of the space (--space {card.name}.{both[0]}=... narrows it)."
        )
    return card, space


def study_key(req: TuneRequest, card: Card, space: dict[str, Dimension], data: str) -> dict:
    """What makes a study's scores comparable (its folder is this dict's digest)."""
    b = req.base
    return {
        "method": card.name,
        "scenario": b.scenario,
        "data": data,
        "code": code_block(strategy_of(card))["digest"],
        "seeds": b.seeds,
        "space": [d.as_dict() for d in space.values()],
        "objective": req.objective,
        "validation": b.validation,
        "sets": b.sets,
        "setting": setting(b),
        "sampler_seed": req.sampler_seed,
    }


def setting(b: RunRequest) -> dict[str, Any]:
    return {
        "backbone": b.backbone,
        "weights": b.weights,
        "image_size": b.image_size,
        "precision": b.precision,
        "protocol": b.protocol,
    }


def digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]


RunTrials = Callable[[list[RunRequest]], list[tuple[list[Result], str | None]]]


def tune(req: TuneRequest, run_trials: RunTrials, echo: Echo = print) -> Path:
    """Run the search to ``req.trials`` finished trials; the record's path.
    ``run_trials`` runs each trial's request and returns, per request, its results and
    the error that stopped it (None when all its runs finished)."""

    card, space = check_tune(req)
    scenario = check_request(req.base)[1]
    data = run_data(req.base, scenario)
    key = study_key(req, card, space, data.identity)
    folder = req.base.out / req.base.scenario / card.name / digest(key)
    base = replace(req.base, out=folder)  # the trials' runs: <study>/runs/
    study = open_study(folder, req.sampler_seed)
    recover(study)
    started, spent = time.monotonic(), previous_seconds(folder)
    echo(f"cl-bench tune: {card.name} on {base.scenario}, study {folder}")
    echo(
        f"  space: {', '.join(describe(d) for d in space.values())}; objective: validation "
        f"{req.objective} accuracy ({base.validation:g} of each class's training images), "
        f"seeds {','.join(map(str, base.seeds))}"
    )
    while (n := finished(study)) < req.trials:
        batch = [study.ask() for _ in range(min(req.batch, req.trials - n))]
        params = [{k: suggest(t, d) for k, d in space.items()} for t in batch]
        trial_reqs = [
            replace(base, sets=[*base.sets, *(set_item(card.name, k, v) for k, v in p.items())])
            for p in params
        ]
        for trial, p, (results, error) in zip(batch, params, run_trials(trial_reqs), strict=True):
            score(study, trial, p, results, error, req.objective, echo)
        write(folder, key, req, study, spent + time.monotonic() - started)
    path = write(folder, key, req, study, spent + time.monotonic() - started)
    best = best_trial(trial_rows(study))
    if best is not None:
        chosen = ", ".join(f"{k}={v}" for k, v in best["params"].items())
        echo(f"best: trial {best['number']}, {chosen}: validation {best['value']:.2f}")
    echo(f"record: {path}")
    return path


def open_study(folder: Path, sampler_seed: int):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    folder.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(folder / "journal.log")))
    return optuna.create_study(
        study_name="tune",
        storage=storage,
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=sampler_seed),
        load_if_exists=True,
    )


def recover(study) -> int:
    """Trials an interrupted search left running: marked failed as interrupted and asked
    again with the same settings (their finished runs are read back). Their count."""
    from optuna.trial import TrialState

    left = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.RUNNING]
    for t in left:
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study.tell(t.number, state=TrialState.FAIL)
        study.enqueue_trial(t.params, skip_if_exists=False)
    return len(left)


def finished(study) -> int:
    """Trials that ran to an end (complete or failed), interrupted ones not counted."""
    from optuna.trial import TrialState

    return sum(
        t.state in (TrialState.COMPLETE, TrialState.FAIL) and not t.user_attrs.get("interrupted")
        for t in study.get_trials(deepcopy=False)
    )


def suggest(trial, d: Dimension) -> Any:
    if d.values:
        return trial.suggest_categorical(d.key, list(d.values))
    if d.whole:
        return trial.suggest_int(d.key, int(d.low), int(d.high), log=d.log)
    return trial.suggest_float(d.key, d.low, d.high, log=d.log)


def describe(d: Dimension) -> str:
    if d.values:
        return f"{d.key} in {{{', '.join(map(str, d.values))}}}"
    return f"{d.key} in [{d.low:g}, {d.high:g}]{' log' if d.log else ''}"


def score(study, trial, params, results, error, objective, echo: Echo) -> None:
    """Tell the study a trial's value (the mean over its seeds) or its failure."""
    from optuna.trial import TrialState

    shown = ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
    )
    trial.set_user_attr("runs", [str(r.path) for r in results])
    trial.set_user_attr("train_s", sum(r.train_s for r in results))
    trial.set_user_attr("total_s", sum(r.total_s for r in results))
    if error is not None or not results:
        trial.set_user_attr("error", error or "no run finished")
        study.tell(trial, state=TrialState.FAIL)
        echo(f"trial {trial.number}: {shown}: failed ({error or 'no run finished'})")
        return
    value = sum(getattr(r, OBJECTIVES[objective]) for r in results) / len(results)
    study.tell(trial, value)
    best = study.best_trial
    echo(f"trial {trial.number}: {shown}: {value:.2f} (best {best.value:.2f}, trial {best.number})")


def trial_rows(study) -> list[dict[str, Any]]:
    from optuna.trial import TrialState

    names = {TrialState.COMPLETE: "complete", TrialState.FAIL: "failed"}
    rows = []
    for t in study.get_trials(deepcopy=False):
        state = names.get(t.state, "running")
        if t.user_attrs.get("interrupted"):
            state = "interrupted"
        rows.append(
            {
                "number": t.number,
                "params": t.params,
                "value": t.value if state == "complete" else None,
                "state": state,
                "runs": t.user_attrs.get("runs", []),
                "train_s": t.user_attrs.get("train_s", 0.0),
                "total_s": t.user_attrs.get("total_s", 0.0),
                **({"error": t.user_attrs["error"]} if "error" in t.user_attrs else {}),
            }
        )
    return rows


def previous_seconds(folder: Path) -> float:
    try:
        return float(json.loads((folder / "tune.json").read_text())["cost"]["search_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def write(folder: Path, key: dict, req: TuneRequest, study, seconds: float) -> Path:
    rows = trial_rows(study)
    best = best_trial(rows)
    return write_record(
        folder,
        {
            "schema": SCHEMA,
            "method": key["method"],
            "scenario": key["scenario"],
            "study": folder.name,
            "objective": req.objective,
            "validation": req.base.validation,
            "seeds": req.base.seeds,
            "space": key["space"],
            "sets": req.base.sets,
            "setting": key["setting"],
            "data": key["data"],
            "code": key["code"],
            "sampler": {"name": "TPESampler", "seed": req.sampler_seed},
            "trials_wanted": req.trials,
            "trials": rows,
            "best": None if best is None else {k: best[k] for k in ("number", "params", "value")},
            "cost": {
                "search_s": round(seconds, 3),
                "train_s": round(sum(r["train_s"] for r in rows), 3),
                "runs_total_s": round(sum(r["total_s"] for r in rows), 3),
                "runs": sum(len(r["runs"]) for r in rows),
                "interrupted_trials": sum(r["state"] == "interrupted" for r in rows),
                "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            },
            "test_split_read": False,
        },
    )
