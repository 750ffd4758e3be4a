"""Runs: ``cl-bench run`` as functions. :func:`plan` checks the arguments and makes one
request per scenario; :func:`run_requests` runs them in this process; :func:`run` does
both. Bad input raises :class:`~cl_bench.errors.UserError` before anything is written."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from cl_bench import arguments
from cl_bench.api.config_file import config_record
from cl_bench.api.sweeps import Sweep, sweep_text
from cl_bench.errors import UserError, refuse_long_names
from cl_bench.store.records import Result

if TYPE_CHECKING:
    from cl_bench.engine.runner import RunRequest

    class _RequestArgs(TypedDict):
        """What :func:`plan` gives every scenario's :class:`RunRequest` alike."""

        seeds: list[int]
        protocol: str
        backbone: str | None
        weights: str | None
        image_size: int | None
        data_root: Path | None
        download: bool
        device: str
        precision: str
        deterministic: str
        out: Path
        sets: list[str]
        progress: bool
        log: list[str]
        validation: float


__all__ = ["RunsFailed", "plan", "run", "run_requests", "settings_as_sets"]

Echo = Callable[[str], None]


class RunsFailed(Exception):
    """Some runs failed while running (bad data met mid-run, e.g. an image spoiled after
    the decode check); the others finished. ``results``: the finished runs; ``failed``:
    one label per failed run. Each failure is recorded beside its result; running again
    retries them."""

    def __init__(self, results: list[Result], failed: list[str], out: Path) -> None:
        super().__init__(
            f"{len(failed)} run(s) failed ({', '.join(failed)}): see `cl-bench "
            f"status --results {out}`; the same command runs them again."
        )
        self.results, self.failed = results, failed


def settings_as_sets(settings: Mapping[str, object] | None) -> list[str]:
    """``{"tosca.epochs": 3}`` -> ``["tosca.epochs=3"]``, the command line's ``--set``.

    A key is ``<method>.<setting>`` (a method being run) or ``scenario.<setting>``. A
    value is a Python value (number, bool, None, list, dict), or a string, read as on
    the command line (``"0.01"`` is a number there, ``"batch"`` a name, ``"0.01,0.05"``
    a sweep), or :func:`cl_bench.sweep` of values: one configuration per value (a Python
    list is one value, for a setting that takes a list)."""
    sets = []
    for key, value in arguments.mapping(
        "settings", settings, 'settings={"tosca.epochs": 5}'
    ).items():
        if not isinstance(key, str) or "=" in key:
            raise UserError(
                f"settings key {key!r} must be a string owner.key, e.g. "
                '"tosca.epochs" or "scenario.increment".'
            )
        if isinstance(value, Sweep):
            sets.append(f"{key}={sweep_text(key, value)}")
            continue
        try:
            text = value if isinstance(value, str) else json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise UserError(
                f"settings[{key!r}] = {value!r} is not a number, bool, None, string, list or dict."
            ) from None
        sets.append(f"{key}={text}")
    return sets


@refuse_long_names
def plan(
    methods: str | Sequence[str] | None = None,
    scenario: str | Sequence[str] = "fmnist",
    seeds: int | Iterable[int] = (1993,),
    *,
    out: str | Path = "results",
    backbone: str | None = None,
    weights: str | None = None,
    image_size: int | None = None,
    data_root: str | Path | None = None,
    download: bool = False,
    device: str = "auto",
    precision: str = "auto",
    progress: bool = False,
    sets: Iterable[str] = (),
    protocol: str = "fair",
    deterministic: str = "strict",
    log: str | Iterable[str] = (),
    validation: float = 0.0,
    config_file: str | Path | None = None,
) -> list[RunRequest]:
    """One request per scenario (and per configuration of a sweep, ``sets`` such as
    ``"tosca.lr=0.01,0.05"``: :mod:`cl_bench.cards.sweep`), the arguments checked that
    need no card: what :func:`run` runs, and what ``cl-bench run`` runs or hands to a
    launcher. A request without a backbone gets its scenario's
    (:func:`cl_bench.cards.catalogue.resolve_backbone`). ``config_file``: the config file
    the arguments came from, named with its digest in every run's record
    (:func:`cl_bench.api.config_file.config_record`)."""
    from cl_bench.cards.protocol import check_protocol
    from cl_bench.cards.sweep import expand_sets, swept_items
    from cl_bench.engine.environment import (
        check_determinism_name,
        check_device_name,
        check_precision_name,
    )
    from cl_bench.engine.runner import RunRequest, default_methods
    from cl_bench.engine.trackers import check_trackers
    from cl_bench.scenarios.validation import check_fraction

    seed_list = arguments.seeds(seeds)
    scenarios = arguments.names("scenario", scenario, 'scenario="fmnist"')
    if not scenarios:
        raise UserError("--scenario is empty; give at least one, e.g. --scenario fmnist.")
    check_protocol(arguments.text("protocol", protocol, 'protocol="fair"'))
    method_list = [] if methods is None else arguments.methods(methods)
    common: _RequestArgs = {
        "seeds": seed_list,
        "protocol": protocol,
        "backbone": arguments.text(
            "backbone", backbone, 'backbone="vit_base_patch16_224"', optional=True
        ),
        "weights": arguments.text("weights", weights, 'weights="random"', optional=True, path=True),
        "image_size": arguments.whole("image_size", image_size, "image_size=224", optional=True),
        "data_root": arguments.folder("data_root", data_root, 'data_root="~/data"', optional=True),
        "download": arguments.flag("download", download),
        "device": arguments.text("device", device, 'device="cuda"'),
        "precision": arguments.text("precision", precision, 'precision="fp32"'),
        "deterministic": arguments.text("deterministic", deterministic, 'deterministic="strict"'),
        "out": arguments.folder("out", out, 'out="results"'),
        "sets": arguments.strings("sets", sets, 'sets=["tosca.epochs=5"]'),
        "progress": arguments.flag("progress", progress),
        "log": check_trackers(arguments.names("log", log, 'log=["tensorboard", "csv"]')),
        "validation": check_fraction(validation),
    }
    check_device_name(common["device"])
    check_precision_name(common["precision"])
    check_determinism_name(common["deterministic"])
    source = arguments.folder("config_file", config_file, 'config_file="run.yaml"', optional=True)
    recorded = None if source is None else config_record(source)
    swept = swept_items(common["sets"])  # a sweep: one request per scenario and configuration
    reqs = []
    for name in scenarios:
        for sets in expand_sets(common["sets"]):
            reqs.append(RunRequest(methods=method_list, scenario=name, **common))
            reqs[-1].sets, reqs[-1].sweep = sets, swept
            reqs[-1].config_file = recorded
    for req in reqs:  # the default set is the one that runs on the scenario's backbone
        # RunRequest.__post_init__ has replaced a None backbone by the scenario's
        req.methods = req.methods or default_methods(cast(str, req.backbone))
    return reqs


@refuse_long_names
def run_requests(requests: list[RunRequest], echo: Echo | None = print) -> list[Result]:
    """Run every missing method x seed of the requests in this process, skipping finished
    runs; the results of all (a run another process is computing now is left out).
    Raises :class:`RunsFailed` after the last run when some failed on the way."""
    from cl_bench.engine.runner import execute, preflight

    say = arguments.callback("echo", echo) or (lambda _: None)
    if len(requests) > 1:
        preflight(requests)  # a bad last request stops the command before anything runs
    failed: list[str] = []
    done = [
        Result.from_run(record, req.out) for req in requests for record in execute(req, say, failed)
    ]
    if failed:
        raise RunsFailed(done, failed, requests[0].out)
    return done


@refuse_long_names
def run(
    methods: str | Sequence[str] | None = None,
    scenario: str | Sequence[str] = "fmnist",
    seeds: int | Iterable[int] = (1993,),
    *,
    out: str | Path = "results",
    backbone: str | None = None,
    weights: str | None = None,
    image_size: int | None = None,
    data_root: str | Path | None = None,
    download: bool = False,
    device: str = "auto",
    precision: str = "auto",
    progress: bool = False,
    settings: Mapping[str, object] | None = None,
    protocol: str = "fair",
    deterministic: str = "strict",
    log: str | Iterable[str] = (),
    loggers: Sequence[object] = (),
    plugins: Sequence[object] = (),
    config_file: str | Path | None = None,
    validation: float = 0.0,
    tuned: bool | str = False,
    tuned_from: str | Path = "results/tune",
    echo: Echo | None = print,
) -> list[Result]:
    """Run methods x seeds on one or more scenarios, as ``cl-bench run`` does, and
    return one :class:`Result` per run (finished runs in ``out`` are read, not run again).

    ``methods``: names, or None for the default set that runs on the backbone;
    ``scenario``: a name or several; ``backbone`` None: the scenario's default backbone;
    ``protocol``: "fair" (the cards' defaults) or "paper" (each card's ``paper:`` block;
    ``settings`` still win); ``device``: "auto", "cpu", "cuda" or "cuda:K";
    ``precision``: "auto", "fp32", "bf16" or "fp16" (a GPU without bf16);
    ``deterministic``: "strict" (bitwise repeats on a GPU) or "fast";
    ``settings``: ``{"<method>.<key>": value, "scenario.<key>": value}``, the command
    line's ``--set`` (see :func:`settings_as_sets`); ``log``: trackers among "csv",
    "tensorboard", "wandb", "mlflow" (:mod:`cl_bench.engine.trackers`); ``loggers``:
    Avalanche loggers of your own, given each run's metrics through
    ``log_single_metric``; ``validation``: the share of each class's training images held
    out and evaluated on instead of the test set (0: the test set;
    :mod:`cl_bench.scenarios.validation`); ``tuned``: True runs each method with the
    settings its finished ``cl-bench tune`` search on the scenario chose (under
    ``tuned_from``), a scenario's name those of a search on that scenario;
    ``plugins``: Avalanche plugins of your own (one, or a list of
    instances of ``avalanche.core.SupervisedPlugin`` or another ``BasePlugin``), added to
    the strategy of every run made here after cl-bench's own plugins, so their callbacks
    (``after_training_exp``, ``after_eval_exp``, ...) see each task of each run. The same
    instances serve every run, one run after another (reset what they keep in
    ``before_training`` if it must not carry over); a finished run that is read, not
    run, calls nothing. Plugins are not part of a run's identity: they are meant to
    watch (metrics, logs, probes), and one that changes training makes numbers that
    its result file does not describe. ``config_file``: the config file the arguments
    came from (``cl_bench.run(**cl_bench.load_config("run.yaml"))`` gives it), named with
    its digest in each run's record, not part of the run's identity. ``echo``: where the
    progress lines go (None: nowhere). Raises UserError for bad input (nothing written)
    and :class:`RunsFailed` when runs failed midway (the others finished).

        class Seen(SupervisedPlugin):
            def __init__(self):
                super().__init__()
                self.trained = []

            def after_training_exp(self, strategy, **kwargs):
                self.trained.append(strategy.experience.current_experience)

        seen = Seen()
        cl_bench.run(["simplecil"], scenario="synthetic", plugins=[seen])
        seen.trained  # [0, 1, 2, 3, 4]
    """
    echo = arguments.callback("echo", echo)
    own_loggers = arguments.loggers(loggers)
    own_plugins = arguments.plugins(plugins)
    requests = plan(
        methods,
        scenario,
        seeds,
        out=out,
        backbone=backbone,
        weights=weights,
        image_size=image_size,
        data_root=data_root,
        download=download,
        device=device,
        precision=precision,
        progress=progress,
        sets=settings_as_sets(settings),
        protocol=protocol,
        deterministic=deterministic,
        log=log,
        validation=validation,
        config_file=config_file,
    )
    for req in requests:
        req.loggers, req.plugins = own_loggers, own_plugins
    if tuned is not False:
        from cl_bench.tune.use import apply_tuned

        on = arguments.text("tuned", tuned, 'tuned="synthetic"') if tuned is not True else None
        for line in apply_tuned(requests, tuned_from, on):
            if echo is not None:
                echo(line)
    return run_requests(requests, echo)
