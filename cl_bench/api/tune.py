"""Hyper-parameter search without the test set (``cl-bench tune``) and the settings it
chose (``cl-bench run --tuned``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml

from cl_bench import arguments
from cl_bench.api.runs import plan, settings_as_sets
from cl_bench.errors import UserError, refuse_long_names
from cl_bench.store.records import Result
from cl_bench.tune.use import apply_tuned

if TYPE_CHECKING:
    from cl_bench.engine.runner import RunRequest
    from cl_bench.grid.options import LaunchOptions
    from cl_bench.tune.search import TuneRequest

__all__ = ["TUNE_OUT", "apply_tuned", "tune", "tune_request"]

Echo = Callable[[str], None]
TUNE_OUT = Path("results/tune")


@refuse_long_names
def tune(
    method: str,
    scenario: str = "fmnist",
    seeds: int | Iterable[int] = (1993,),
    *,
    trials: int = 20,
    space: str | Sequence[str] = (),
    objective: str = "avg",
    validation: float = 0.1,
    settings: dict[str, object] | None = None,
    out: str | Path = TUNE_OUT,
    options: LaunchOptions | None = None,
    echo: Echo | None = print,
    **run_options: Any,
) -> dict[str, Any]:
    """Search ``method``'s settings on ``scenario`` with Optuna (TPE, seeded), each trial a
    run per seed scored on a validation split of the training data (``validation``: the
    share of each class's training images held out), never on the test set; resumable
    (the same call goes on where an interrupted one stopped). ``space``: ``--space``
    items (``"tosca.lr=1e-4..1e-1:log"``, ``"tosca.optimizer=sgd|adam"``) replacing the
    card's ``search:`` entries; ``objective``: "avg" or "last" validation accuracy, the
    mean over ``seeds``; ``settings``: fixed settings, as :func:`cl_bench.run` takes
    them (or ``sets``: ``--set`` items); ``options``: a launcher
    (:func:`cl_bench.api.launch_options`; None: trials one after another in this process;
    with ``jobs`` workers, as many trials at once). The
    other keyword arguments are :func:`cl_bench.run`'s (``backbone``, ``weights``,
    ``image_size``, ``precision``, ...). Returns the search record (``tune.json``: every
    trial, ``best``, ``cost``), with its ``path``."""
    from cl_bench.tune.record import read_record
    from cl_bench.tune.search import tune as search

    req = tune_request(
        method,
        scenario,
        seeds,
        trials=trials,
        space=space,
        objective=objective,
        validation=validation,
        settings=settings,
        out=out,
        options=options,
        **run_options,
    )
    say = arguments.callback("echo", echo) or (lambda _: None)
    path = search(req, trial_runner(options, say), say)
    return {**read_record(path), "path": path}


def tune_request(
    method: str,
    scenario: str,
    seeds: int | Iterable[int],
    *,
    trials: int,
    space: str | Sequence[str],
    objective: str,
    validation: float,
    settings: dict[str, object] | None,
    out: str | Path,
    options: LaunchOptions | None,
    **run_options: Any,
) -> TuneRequest:
    """The checked :class:`~cl_bench.tune.search.TuneRequest` of :func:`tune`'s arguments
    (``cl-bench tune`` builds the same)."""
    from cl_bench.tune.search import TuneRequest

    reqs = plan(
        arguments.text("method", method, 'method="tosca"'),
        arguments.text("scenario", scenario, 'scenario="fmnist"'),
        seeds,
        out=out,
        sets=[*settings_as_sets(settings), *run_options.pop("sets", ())],
        validation=validation,
        **run_options,
    )
    if len(reqs) != 1:
        raise UserError(
            "tune searches one scenario, without sweeps: give one scenario and no "
            "comma-separated --set values (search a setting with --space instead)."
        )
    items = [space] if isinstance(space, str) else space
    return TuneRequest(
        reqs[0],
        trials=cast(int, arguments.whole("trials", trials, "trials=20")),
        space=arguments.strings("space", items, 'space=["tosca.lr=1e-4..1e-1:log"]'),
        objective=arguments.text("objective", objective, 'objective="avg"'),
        batch=batch_size(options),
    )


def batch_size(options: LaunchOptions | None) -> int:
    """Trials at once: one in this process; a local launcher's workers; SLURM's array
    parallelism (4 when unset)."""
    if options is None or options.launcher is None:
        return 1
    if options.launcher == "slurm":
        return options.slurm_array_parallelism or 4
    return options.jobs or len(os.sched_getaffinity(0))


TrialRuns = Callable[["list[RunRequest]"], "list[tuple[list[Result], str | None]]"]


def trial_runner(options: LaunchOptions | None, echo: Echo) -> TrialRuns:
    """Runs a batch of trial requests: in this process, or as a grid on a launcher."""
    from cl_bench.engine.runner import execute

    say = _indented(echo)

    def in_process(reqs: list[RunRequest]) -> list[tuple[list[Result], str | None]]:
        out: list[tuple[list[Result], str | None]] = []
        for req in reqs:
            failed: list[str] = []
            try:
                records = execute(req, say, failed)
            except UserError as e:
                out.append(([], e.paragraph()))
                continue
            results = [Result.from_run(r, req.out) for r in records]
            out.append((results, "; ".join(failed) or None))
        return out

    def on_launcher(reqs: list[RunRequest]) -> list[tuple[list[Result], str | None]]:
        from cl_bench.grid.launch import launch

        assert options is not None
        grid = launch(reqs, options, echo=say)
        unfinished = [*grid.failed, *grid.interrupted]
        out: list[tuple[list[Result], str | None]] = []
        for req in reqs:
            found = [r for r in grid.results if _of(req, r)]
            missing = len(req.seeds) - len(found)
            why = "; ".join(f"{label}: {error}" for label, error in unfinished)
            out.append((found, None if missing == 0 else why or f"{missing} run(s) unfinished"))
        return out

    return in_process if options is None or options.launcher is None else on_launcher


def _of(req: RunRequest, result: Result) -> bool:
    """Whether ``result`` is a run of the trial ``req`` (its searched values)."""
    params = result.config["method"]
    for item in req.sets:
        head, _, text = item.partition("=")
        owner, _, key = head.partition(".")
        if owner == result.method and params.get(key) != yaml.safe_load(text):
            return False
    return result.seed in req.seeds


def _indented(echo: Echo) -> Echo:
    """The runs' lines, indented under their trial; a line already shown (the run's
    header and warnings, the same for every trial) is not shown again."""
    shown: set[str] = set()

    def say(line: str) -> None:
        if line not in shown:
            shown.add(line)
            echo(f"    {line.strip()}")

    return say
