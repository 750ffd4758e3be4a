"""``cl-bench run --dry-run``: the plan of a command, without weights, training or network.

For every run it prints the method, seed, result path and whether the run is done,
stale (a result of other code or packages, computed again), running, failed or pending,
under a line per scenario with the backbone, weights, protocol, device and precision;
below each run, every resolved setting that differs from the cards' own values, with
where it comes from (the protocol, ``--set``, or the stream, as CODA-Prompt's task
count); then the sources of the paper settings. Bad input it can see is refused as a
run refuses it: a data root that lacks the scenario's folders, a class order or task
split that cannot be (against the class count, where the card states it).

The result path is the hash of the run's resolved config (:func:`runner.resolved_config`),
which names the data by its identity and the backbone by what a loaded one would
report. The data is read as a run reads it (the small in-memory datasets, or the names,
sizes and times of image files; nothing is decoded). The backbone is built without
weights: timm creates the architecture on the ``meta`` device (shapes, no values, no
download), which gives the feature width, input size and the weights' normalisation;
the weights are named and digested as the loaders do it (a pinned tag by its name, a
local file by its bytes). Three things a dry run may lack make a path unknown, shown
with the reason instead of a guess: a ``--weights`` file that is absent on this
machine, data that ``--download`` has not fetched yet, and the class count of a dataset
whose card does not state it (only needed by a method that sizes itself by the task
count).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cl_bench.backbones import use_weights_normalization
from cl_bench.backbones.planned import Unknown, planned_backbone
from cl_bench.cards.card import Card
from cl_bench.cards.catalogue import parse_sets
from cl_bench.cards.protocol import (
    SCENARIO_PREFIX,
    changed_settings,
    paper_settings,
    run_scenario,
)
from cl_bench.cards.resolve import resolve_for_backbone
from cl_bench.engine.environment import device_key, resolve_device, resolve_precision
from cl_bench.engine.runner import RunRequest, check_request, resolved_config, run_data
from cl_bench.errors import UserError
from cl_bench.grid.options import LaunchOptions
from cl_bench.grid.target import Target, check_plan_memory, worker_target
from cl_bench.scenarios import check_class_order
from cl_bench.scenarios.footprint import class_count
from cl_bench.scenarios.image_data import ImageData
from cl_bench.scenarios.order import check_split, task_split
from cl_bench.store import results


def check_stream(scenario: Card) -> None:
    """The class order and the task split against the class count, where the card
    states it (a run checks them against the loaded data)."""
    n_classes = class_count(scenario)
    check_class_order(scenario, n_classes)
    if n_classes is not None:
        check_split(n_classes, scenario.params["init_cls"], scenario.params["increment"])


def size_by_stream(methods: list[Card], scenario: Card) -> None:
    """Settings that mean "the stream's number of tasks" (``n_tasks: 0``), resolved as
    :func:`runner.load_shared` does; :class:`Unknown` without a class count."""
    sized = [card for card in methods if card.params.get("n_tasks") == 0]
    if not sized:
        return
    n_classes = class_count(scenario)
    if n_classes is None:
        raise Unknown(
            f"{', '.join(c.name for c in sized)} sizes itself by the task count, "
            f"and {scenario.path} does not state dataset_args.n_classes"
        )
    tasks = len(task_split(n_classes, scenario.params["init_cls"], scenario.params["increment"]))
    for card in sized:
        card.params["n_tasks"] = tasks


def run_state(path: Path) -> str:
    there = results.found(path).state
    if there == "done":
        return "done"
    lock = results.probe_lock(path)
    if lock and lock.held:
        return "running"
    if there == "stale":
        return "stale"
    return "failed" if results.read_failure(path) else "pending"


def data_of(req: RunRequest, scenario: Card) -> ImageData:
    """The dataset as a run loads it (file names and sizes of images on disk, nothing
    decoded), whose identity is part of every result path; :class:`Unknown` while a
    dataset that ``--download`` fetches is not there yet."""
    try:
        return run_data(req, scenario, download=False)
    except UserError:
        if req.download:
            raise Unknown(
                f"the {scenario.name} data is not downloaded yet (--download "
                "fetches it when the run starts)"
            ) from None
        raise


def show(value: Any) -> str:
    """A setting as it is written in a card or after --set."""
    return str(value).lower() if isinstance(value, bool) or value is None else str(value)


def origins(req: RunRequest, card: Card, scenario: Card) -> dict[str, str]:
    """Where each changed setting of ``card``'s runs comes from, by key."""
    out = {}
    if card.protocol == "paper":
        out.update({s.key: "paper" for s in paper_settings(card)})
    for owner, key, _ in parse_sets(req.sets, [*req.methods, "scenario"]):
        if owner == card.name:
            out[key] = "--set"
        elif owner == "scenario":
            out[SCENARIO_PREFIX + key] = "--set"
    out.setdefault("n_tasks", "the stream's task count")
    return out


def plan_request(req: RunRequest, target: Target, here: bool = True) -> tuple[list[str], list[str]]:
    """The lines of one scenario's plan, and the state of each of its runs. ``here``:
    the runs would run on this machine (in this process or local workers), so its
    memory is checked as the run checks it; of SLURM jobs, only the GPU memory of the
    type the plan counts on (:func:`~cl_bench.grid.launch.check_plan_memory`)."""
    device, precision, device_key = target.device, target.precision, target.device_key
    methods, scenario = check_request(req)
    check_stream(scenario)
    check_plan_memory(methods, scenario, req, target, here)
    head = (
        f"{scenario.name}: backbone {req.backbone}, weights {{}}, protocol {req.protocol}, "
        f"{device}/{precision}, seeds {', '.join(map(str, req.seeds))}"
    )
    try:
        size_by_stream(methods, scenario)
        data = data_of(req, scenario)
        backbone = planned_backbone(req.backbone, req.weights, req.image_size)
        if scenario.params.get("normalize", "none") == "backbone":
            use_weights_normalization(backbone)
        resolved = {card.name: resolve_for_backbone(card, backbone) for card in methods}
        lines = [head.format(backbone.weights)]
    except Unknown as e:
        resolved = {}
        backbone, lines = (
            None,
            [head.format(req.weights or "pinned"), f"  result paths unknown: {e}"],
        )
    states = []
    for seed in req.seeds:
        for card in methods:
            mine = run_scenario(card, scenario)
            if backbone is None:
                states.append("unknown")
                lines.append(f"  unknown  {card.name} seed {seed}")
            else:
                path = results.run_path(
                    req.out,
                    scenario.name,
                    card.name,
                    seed,
                    resolved_config(card, mine, backbone, precision, data, device_key),
                )
                states.append(run_state(path))
                lines.append(f"  {states[-1]:8s} {card.name} seed {seed}  {path}")
            where = resolved.get(card.name, {}) | origins(req, card, scenario)
            changed = [
                f"{k}={show(v)}" + (f" ({where[k]})" if k in where else "")
                for k, v in changed_settings(card, mine)
            ]
            lines.append(f"           {', '.join(changed) if changed else 'card defaults'}")
    return lines, states


def sources(methods: list[str]) -> list[str]:
    """Each method's paper settings with their sources, once per command."""
    from cl_bench.cards.catalogue import load_method

    lines = []
    for name in methods:
        card = load_method(name)
        settings = paper_settings(card)
        lines.append(f"  {name}:" + ("" if settings else " its card defaults (paper: {})"))
        lines += [f"    {s.key}={show(s.value)}: {s.source}" for s in settings]
    return lines


def target(req: RunRequest, opts: LaunchOptions) -> Target:
    """Device, precision and device key of the request's runs, decided as the launcher
    decides them (all are part of every result path)."""
    if opts.launcher is not None:
        return worker_target(req, opts)
    device = resolve_device(req.device)
    return Target(
        device.type,
        resolve_precision(req.precision, device),
        None,
        device_key(device, req.deterministic),
    )


def dry_run(reqs: list[RunRequest], opts: LaunchOptions) -> list[str]:
    """The plan of every request, as ``cl-bench run`` with ``opts`` would run it."""
    lines, states = ["dry run: nothing is trained or written"], []
    for req in reqs:
        more, found = plan_request(req, target(req, opts), here=opts.launcher != "slurm")
        lines, states = lines + more, states + found
    if any(req.protocol == "paper" for req in reqs):
        lines += [
            "paper settings and their sources:",
            *sources(list(dict.fromkeys(m for req in reqs for m in req.methods))),
        ]
    counts = {
        s: states.count(s) for s in ("done", "stale", "running", "failed", "pending", "unknown")
    }
    lines.append(
        f"{len(states)} runs planned: "
        + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s in ("done", "pending"))
    )
    return lines
