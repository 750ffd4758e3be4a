"""Expand methods x scenario x seeds, skip what is finished, run the rest.

Everything a run could fail on because of the user's input (names, --set
keys, data, weights, method/backbone fit, a memory estimate beyond the machine's)
is checked before the first run starts, so a bad command writes nothing. Each
run is computed under its lock
(:func:`cl_bench.store.results.run_once`), here or in the workers of
:mod:`cl_bench.grid.launch`, so two invocations never compute the same run at once.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from avalanche.training.plugins import EvaluationPlugin

from cl_bench.accounting.block import accounting_fields
from cl_bench.accounting.count import TrainFlops, backbone_flops, inference_flops
from cl_bench.backbones import (
    backbone_kind,
    load_backbone,
    use_weights_normalization,
)
from cl_bench.backbones.base import TORCH_RUNTIME, Backbone
from cl_bench.backbones.compiled import runtime_for
from cl_bench.cards.card import Card
from cl_bench.cards.catalogue import load_method, load_scenario, parse_sets, resolve_backbone
from cl_bench.cards.places import CHECKOUT
from cl_bench.cards.protocol import (
    DEFAULT_PROTOCOL,
    apply_protocol,
    config_tag,
    run_scenario,
)
from cl_bench.cards.resolve import resolve_for_backbone
from cl_bench.cards.strategy import strategy_of
from cl_bench.contract import (
    AUGMENT_VIEWS,
    AdaptedStream,
    Inputs,
    Loading,
    Method,
    MethodSpec,
    Resumable,
    check_backbone,
    configure_loading,
    drive,
    spec_of,
)
from cl_bench.engine.checkpoint import RunCheckpoint
from cl_bench.engine.environment import (
    determinism,
    device_key,
    make_deterministic,
    peak_memory,
    reset_peak_memory,
    resolve_device,
    resolve_precision,
    seed_everything,
    threads,
    versions,
)
from cl_bench.engine.epoch_views import EpochView, ViewClock, evaluation_view
from cl_bench.engine.features import FeatureStore
from cl_bench.engine.finite import FiniteWatch
from cl_bench.engine.memory import check_memory
from cl_bench.engine.out_of_memory import out_of_memory_named, release_memory
from cl_bench.engine.recording import Recorder
from cl_bench.engine.trackers import Tracking, check_trackers, open_trackers
from cl_bench.errors import UserError
from cl_bench.metrics import summarize
from cl_bench.scenarios import check_class_order, load_data, locate_data, scenario_order
from cl_bench.scenarios.decode_check import check_decodes
from cl_bench.scenarios.decoded_tests import eval_inputs
from cl_bench.scenarios.image_data import ImageData
from cl_bench.scenarios.order import task_split, tasks_of
from cl_bench.scenarios.stream import Stream, build_stream
from cl_bench.scenarios.transforms import eval_transform, train_transform
from cl_bench.scenarios.validation import held_out
from cl_bench.source_identity import code_block
from cl_bench.store import results
from cl_bench.store.feature_cache import entry_write_problem
from cl_bench.store.filelock import held
from cl_bench.store.protocol_block import protocol_block

DEFAULT_SCENARIO = "fmnist"
DEFAULT_SEEDS = (1993,)


@dataclass
class RunRequest:
    """One ``cl-bench run`` invocation on one scenario. ``backbone`` None: the
    scenario card's default backbone (and its weights, unless ``weights`` is given)."""

    methods: list[str]
    scenario: str = DEFAULT_SCENARIO
    seeds: list[int] = field(default_factory=lambda: list(DEFAULT_SEEDS))
    backbone: str | None = None
    weights: str | None = None
    image_size: int | None = None
    data_root: Path | None = None
    download: bool = False
    device: str = "auto"
    precision: str = "auto"
    out: Path = Path("results")
    sets: list[str] = field(default_factory=list)
    progress: bool = True
    threads: int | None = None
    protocol: str = DEFAULT_PROTOCOL
    deterministic: str = "strict"
    log: list[str] = field(default_factory=list)  # trackers (engine.trackers); no identity
    loggers: list = field(default_factory=list)  # Avalanche loggers, in this process only
    plugins: list = field(default_factory=list)  # Avalanche plugins, in this process only
    # the --config file the request came from ({"path", "sha256"}): recorded, no identity
    config_file: dict | None = None
    # the owner.key of each item of ``sets`` that a sweep gave (cl_bench.cards.sweep): named
    # in the line before the runs; the runs' identities do not depend on it
    sweep: list[str] = field(default_factory=list)
    # the share of each class's training images held out and evaluated on instead of the
    # test set (cl_bench.scenarios.validation); 0: the test set
    validation: float = 0.0
    # method -> where its tuned settings (already among ``sets``) come from: recorded in
    # its runs' config as ``tuned`` (cl_bench.tune.use)
    tuned: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a method or seed named twice is one run, not two samples of the mean
        self.methods = list(dict.fromkeys(self.methods))
        self.seeds = list(dict.fromkeys(self.seeds))
        if self.backbone is None:
            self.backbone, self.weights = resolve_backbone(self.scenario, None, self.weights)


def default_methods(backbone: str) -> list[str]:
    """Methods in the default run: cards marked ``default_run`` that fit the backbone.
    Only those are loaded (imported): a broken card of your own that is not in the
    default run does not stop it."""
    from cl_bench.cards.catalogue import card_index
    from cl_bench.cards.places import read_yaml

    kind = backbone_kind(backbone)
    cards = [
        load_method(name)
        for name, found in sorted(card_index()["method"].items())
        if read_yaml(found.path).get("default_run")
    ]
    return [c.name for c in cards if strategy_of(c).backbones in ("any", kind)]


def resolve_cards(req: RunRequest) -> tuple[list[Card], Card]:
    """Load the cards, set the protocol, then apply ``--set`` (which wins over the
    protocol's settings); every naming error surfaces here."""
    kind = backbone_kind(req.backbone)
    methods = [load_method(m) for m in req.methods]
    scenario = load_scenario(req.scenario)
    for card in methods:
        check_backbone(strategy_of(card), card.name, req.backbone, kind)
    apply_protocol(req.protocol, methods)
    owners = {c.name: c for c in methods} | {"scenario": scenario}
    for owner, key, value in parse_sets(req.sets, list(owners)):
        owners[owner].override(key, value)
        for card in methods if owner == "scenario" else []:
            card.scenario_sets.pop(key, None)
    for card in owners.values():
        card.check()  # rules between settings, e.g. top_k <= pool_size
    for card in methods:
        card.tuned = req.tuned.get(card.name)
    return methods, scenario


def check_request(req: RunRequest) -> tuple[list[Card], Card]:
    """Everything checkable before data and backbone load: cards, settings and their
    bounds, image size, the data's place and the class order's form, and the folders
    the runs will write (results; the feature cache where it is still to be made: one
    that exists is read, and written where it can be, :class:`FeatureStore`)."""
    from cl_bench.engine.features import cache_dir
    from cl_bench.input_checks import cache_folder, check_image_size, check_seeds, writable_dir

    check_seeds(req.seeds)
    check_trackers(req.log)
    check_image_size(req.backbone, backbone_kind(req.backbone), req.image_size)
    methods, scenario = resolve_cards(req)
    locate_data(scenario, req.data_root, req.download)
    check_class_order(scenario, None)  # its fit to the class count: when data is loaded
    writable_dir(req.out, "--out")
    if any(uses_feature_cache(card) for card in methods):
        cache_folder(cache_dir(), "The feature cache ($CL_BENCH_CACHE)")
    return methods, scenario


def uses_feature_cache(card: Card) -> bool:
    return spec_of(strategy_of(card)).reads_feature_cache


def resolved_config(
    card: Card,
    scenario: Card,
    backbone: Backbone,
    precision: str,
    data: ImageData,
    device: dict | None = None,
) -> dict:
    """Everything that changes a run's numbers (and a non-default protocol's name);
    hashed into its file name. ``scenario``: as the run sees it (:func:`run_scenario`).
    ``data``: the loaded dataset, whose :attr:`~ImageData.identity` names its contents
    (another data root, or other files in it, is another result).
    Of ``backbone`` only the attributes recorded here are read (the dry run passes
    one without weights). ``device``: :func:`~cl_bench.engine.environment.device_key`,
    None on the CPU (absent, so CPU results keep the names they always had). The backbone
    block names the compiled runtime of the frozen feature passes of a method that reads
    them (:func:`~cl_bench.backbones.compiled.runtime_for`; absent for torch eager, so
    those results keep their names too)."""
    runtime = runtime_for(backbone.kind, "cpu" if device is None else device["kind"], precision)
    reads_features = uses_feature_cache(card)
    return {
        **({"device": device} if device is not None else {}),
        "method": {"name": card.name, **card.params},
        "scenario": {"name": scenario.name, **scenario.params},
        "data": data.identity,
        # only a validation run has the key, so test runs keep the names they always had
        **({"validation": data.validation} if data.validation else {}),
        "backbone": {
            "name": backbone.name,
            "weights": backbone.weights,
            "weights_digest": backbone.weights_digest,
            "input_size": backbone.input_size,
            "dim": backbone.dim,
            "normalization": backbone.normalization,
            "precision": precision,
            **({"runtime": runtime} if reads_features and runtime != TORCH_RUNTIME else {}),
        },
        "transform": {
            "train": train_transform(data.on_disk, backbone.input_size).id,
            "eval": eval_transform(data.on_disk, backbone.input_size).id,
        },
        **config_tag(card),
    }


class QuietEvaluation(EvaluationPlugin):
    """An evaluator with no metrics and no loggers, whose callbacks return at once
    (Avalanche's would make a logging view of the experience at every one)."""

    def _update_metrics_and_loggers(self, strategy, callback: str) -> None:
        return None


def quiet_evaluator() -> EvaluationPlugin:
    """No Avalanche metrics or loggers: the Recorder plugin records what we report."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return QuietEvaluation(loggers=[])


def run_one(
    card: Card,
    scenario: Card,
    data: ImageData,
    backbone: Backbone,
    store: FeatureStore,
    seed: int,
    device: torch.device,
    progress: bool,
    result: Path | None = None,
    log: Sequence[str] = (),
    loggers: Sequence[Any] = (),
    plugins: Sequence[Any] = (),
    config_file: dict | None = None,
) -> dict:
    """Train and evaluate one method on one seed; returns the result record. With
    ``result`` (its path), a checkpoint after each task lets a killed run resume, and
    the trackers ``log`` and Avalanche ``loggers`` receive the per-task metrics, the
    final numbers and the configuration (:mod:`cl_bench.engine.trackers`). ``plugins``
    (Avalanche plugins of the caller's own) join the strategy's after cl-bench's own;
    ``config_file`` (the config file's path and digest) goes into the record as it is.
    Three steps: the stream the method's inputs call for, the drive, the record."""
    t_start = time.perf_counter()
    reset_peak_memory(device)
    seed_everything(seed)
    order = scenario_order(scenario, data.n_classes, seed)
    sizes = task_split(data.n_classes, scenario.params["init_cls"], scenario.params["increment"])
    cls = strategy_of(card)
    code = code_block(cls)  # the source as the run starts: its modules are imported by now
    before, hits = store.seconds, store.hits
    with out_of_memory_named(card, device):  # extraction included
        inputs = method_inputs(
            spec_of(cls), card, scenario, data, backbone, store, order, sizes, seed
        )
        done = train_and_evaluate(
            cls,
            card,
            data,
            backbone,
            device,
            progress,
            result,
            seed,
            inputs,
            t_start,
            code["digest"],
            open_trackers(log, result, loggers)
            if result is not None and (log or loggers)
            else None,
            plugins,
        )
    features_s = store.seconds - before  # an adapted backbone's features: during the drive
    uses_features = spec_of(cls).inputs in (Inputs.FEATURES, Inputs.ADAPTED_FEATURES) or (
        inputs.test_query is not None
    )
    features_from = (
        None
        if not uses_features
        else ("extracted" if features_s > 0 else "disk cache" if store.hits > hits else "memory")
    )
    record = {
        "schema_version": results.SCHEMA_VERSION,
        "method": card.name,
        "scenario": scenario.name,
        "seed": seed,
        "status": "done",
        "config": resolved_config(
            card, scenario, backbone, store.precision, data, store.device_key
        ),
        "code": code,
        "class_order": order,
        "class_names": [data.class_names[c] for c in order],
        "tasks": [[order[p] for p in t] for t in tasks_of(sizes)],
        "protocol": protocol_block(
            card.protocol, spec_of(cls).protocol, card.params, scenario.params["test_shuffle"]
        ),
        "env": {**versions(device, CHECKOUT), "determinism": determinism()},
        "acc_matrix": done.recorder.acc_matrix,
        "acc_seen": done.recorder.acc_seen,
        **summarize(done.recorder.acc_matrix, done.recorder.acc_seen),
        "routing_acc": done.recorder.routing_acc
        if any(r is not None for r in done.recorder.routing_acc)
        else None,
        "accounting": accounting_block(done.strategy, backbone, done.recorder, done.train_flops),
        "timing": {
            "features_s": features_s,
            "features_from": features_from,
            "train_s": done.recorder.train_s,
            "eval_s": done.recorder.eval_s,
            "total_s": done.checkpoint.elapsed_s + time.perf_counter() - t_start,
            "resumed_from_task": done.checkpoint.resumed_from,
            "threads": done.threads,
        },
        "memory": peak_memory(device),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **({"config_file": config_file} if config_file else {}),
    }
    if done.tracking is not None:
        done.tracking.finish(record)
    return record


@dataclass
class MethodInputs:
    """What a method is driven over, as its declared inputs call for: ``stream``
    (images or features), ``driven`` (the stream, or an adapted method's
    :class:`AdaptedStream` around it), the plugins and loader arguments they need, and
    the cached query of a method that reads one. ``loader_args`` go to training,
    ``eval_args`` to evaluation (on the CPU no worker where the test images are in
    memory)."""

    stream: Stream
    driven: Stream | AdaptedStream
    plugins: list
    loader_args: dict
    eval_args: dict
    test_query: torch.Tensor | None


def method_inputs(
    spec: MethodSpec,
    card: Card,
    scenario: Card,
    data: ImageData,
    backbone: Backbone,
    store: FeatureStore,
    order: list[int],
    sizes: list[int],
    seed: int,
) -> MethodInputs:
    """The stream of one run of a method that consumes ``spec.inputs`` (on cached
    augmented views when it declares :data:`~cl_bench.contract.AUGMENT_VIEWS`)."""
    inputs = spec.inputs
    # the run's loader settings (a method's own loaders read them): files only when
    # the method reads the images on disk, not their cached features
    loading = configure_loading(store.device, data.on_disk and inputs is not Inputs.FEATURES)
    loader_args = eval_args = {}
    train_query = test_query = None
    plugins = []
    if inputs is Inputs.FEATURES:
        train_x, test_x = store.get(backbone, data, "train"), store.get(backbone, data, "test")
        train_tf = eval_tf = None
        if AUGMENT_VIEWS in spec.protocol and (views := card.params[AUGMENT_VIEWS.key]):
            train_x = store.get_views(backbone, data, views)
            train_tf, eval_tf = EpochView(), evaluation_view
            plugins.append(ViewClock(train_tf))
    else:
        train_x, test_x = data.train_x, data.test_x
        train_tf = train_transform(data.on_disk, backbone.input_size)
        eval_tf = eval_transform(data.on_disk, backbone.input_size)
        loader_args = loading.strategy_kwargs()
        if inputs is not Inputs.ADAPTED_FEATURES:  # an adapted method is tested on features
            test_x, eval_tf = eval_inputs(data, backbone.input_size, store.progress)
        if isinstance(test_x, torch.Tensor):  # test images in memory (decoded once)
            eval_args = loading.evaluation_in_memory().strategy_kwargs()
        else:
            eval_args = loader_args
        if inputs is Inputs.IMAGES_WITH_QUERY:
            # the query is the frozen feature of the image as the model sees it: cached
            # for test images, and for training images when training does not augment
            test_query = store.get(backbone, data, "test")
            if train_tf.id == eval_tf.id:
                train_query = store.get(backbone, data, "train")
    stream = build_stream(
        train_x,
        data.train_y,
        test_x,
        data.test_y,
        order,
        sizes,
        test_shuffle=scenario.params["test_shuffle"],
        seed=seed,
        train_transform=train_tf,
        eval_transform=eval_tf,
        train_query=train_query,
        test_query=test_query,
    )
    driven = (
        stream
        if inputs is not Inputs.ADAPTED_FEATURES
        else AdaptedStream(
            stream,
            backbone,
            functools.partial(
                features_stream, store, data, order, sizes, scenario.params["test_shuffle"], seed
            ),
        )
    )
    return MethodInputs(stream, driven, plugins, loader_args, eval_args, test_query)


@dataclass
class Driven:
    """A strategy after its drive, with what the record reads of it."""

    strategy: Method
    recorder: Recorder
    train_flops: TrainFlops
    checkpoint: RunCheckpoint
    threads: dict
    tracking: Tracking | None = None


def train_and_evaluate(
    cls: type,
    card: Card,
    data: ImageData,
    backbone: Backbone,
    device: torch.device,
    progress: bool,
    result: Path | None,
    seed: int,
    inputs: MethodInputs,
    t_start: float,
    code: str,
    tracking: Tracking | None = None,
    plugins: Sequence[Any] = (),
) -> Driven:
    """Build the strategy (or restore it from the run's checkpoint) and drive it over
    its stream, saving a checkpoint after each task when it is :class:`Resumable`
    (``code``: the digest of the run's code; a checkpoint of other code is not resumed;
    ``plugins``: the caller's own, after cl-bench's)."""
    features_only = spec_of(cls).inputs is Inputs.FEATURES

    def build() -> tuple:
        recorder = Recorder(
            inputs.stream.task_of_label, backbone, label=card.name, progress=progress
        )
        train_flops = TrainFlops()
        watch = FiniteWatch(card.name, card.params, card.raw.get("defaults"))  # diverged: fail
        return (
            cls(
                params=card.params,
                backbone=backbone,
                n_classes=data.n_classes,
                device=device,
                plugins=[recorder, train_flops, watch, *inputs.plugins, *plugins],
                evaluator=quiet_evaluator(),
            ),
            recorder,
            train_flops,
        )

    # a strategy that cannot save its state is not checkpointed: a killed run starts over
    checkpoint = RunCheckpoint(
        result if issubclass(cls, Resumable) else None,
        {"method": card.name, "seed": seed, "tasks": len(inputs.stream.train), "code": code},
    )
    strategy, recorder, train_flops = checkpoint.start(build)
    extract_threads = torch.get_num_threads()  # backbone passes: the configured count

    def after_task(done: int) -> None:
        checkpoint.save(strategy, done, time.perf_counter() - t_start)
        if tracking is not None:
            tracking.task(recorder.acc_matrix, recorder.acc_seen)

    with threads(1 if features_only else None) as train_threads:
        drive(
            strategy,
            inputs.driven,
            start=checkpoint.done,
            loader_args=inputs.loader_args,
            eval_args=inputs.eval_args,
            after_task=after_task,
        )
    return Driven(
        strategy,
        recorder,
        train_flops,
        checkpoint,
        {"features": extract_threads, "train_eval": train_threads},
        tracking,
    )


def features_stream(
    store: FeatureStore,
    data: ImageData,
    order: list[int],
    sizes: list[int],
    test_shuffle: bool,
    seed: int,
    backbones: list[Backbone],
) -> Stream:
    """The stream of ``backbones``' concatenated features (an adapted method's, after
    its first task), with the same class order, split and test order as its images."""

    def split(name: str) -> torch.Tensor:
        return torch.cat([store.get(b, data, name) for b in backbones], dim=1)

    return build_stream(
        split("train"),
        data.train_y,
        split("test"),
        data.test_y,
        order,
        sizes,
        test_shuffle=test_shuffle,
        seed=seed,
    )


def accounting_block(
    strategy, backbone: Backbone, recorder: Recorder, train_flops: TrainFlops
) -> dict:
    """Parameters per task (from the recorder) and FLOPs at the end of the stream."""
    return accounting_fields(
        backbone.model,
        recorder.trainable,
        recorder.stored,
        backbone_flops(backbone),
        inference_flops(strategy, backbone),
        train_flops.per_sample,
    )


class SharedFeatureStore(FeatureStore):
    """The feature cache for concurrent workers: one process extracts a missing key
    while the others wait on its lock and then read the file, instead of all of them
    extracting the same features at once. (Cache files are written atomically, so
    this saves work; it is not needed for correctness.) A cache that cannot be written
    is read without a lock: nothing is written there to wait for."""

    def _load(
        self, backbone: Backbone, data: ImageData, split: str, view: int | None
    ) -> torch.Tensor:
        path = self.path(self.key(backbone, data, split, view))
        if not self.use_disk or entry_write_problem(path) is not None:
            return super()._load(backbone, data, split, view)
        with held(path.with_suffix(".lock")):
            return super()._load(backbone, data, split, view)


def trains_backbone(card: Card) -> bool:
    """Whether the method trains a copy of the backbone (it then needs fp32 weights)."""
    return spec_of(strategy_of(card)).trains_backbone


@dataclass
class Shared:
    """What every run of one scenario shares inside one process: the data, the
    backbone and the features extracted from it."""

    data: ImageData
    backbone: Backbone
    store: FeatureStore


def run_data(req: RunRequest, scenario: Card, download: bool | None = None) -> ImageData:
    """The dataset a request's runs see: the scenario's, or with ``req.validation`` its
    validation split in place of the test split (:func:`held_out`)."""
    data = load_data(scenario, req.data_root, req.download if download is None else download)
    return held_out(data, req.validation)


def load_shared(
    req: RunRequest, scenario: Card, methods: list[Card], device: torch.device, precision: str
) -> Shared:
    """Load data and backbone; a missing dataset or weight, an image that does not
    decode or a class order that does not fit the data fails here, before any run."""
    from cl_bench.engine.features import cache_dir

    data = run_data(req, scenario)
    scenario_order(scenario, data.n_classes, req.seeds[0])
    sizes = task_split(data.n_classes, scenario.params["init_cls"], scenario.params["increment"])
    # last of the data's checks: it remembers a dataset that passed, and a refusal writes nothing
    check_decodes(data, cache_dir() / "decoded", req.progress)
    for card in methods:
        if card.params.get("n_tasks") == 0:  # "0: the stream's number of tasks" (CODA-Prompt)
            card.params["n_tasks"] = len(sizes)
    backbone = load_backbone(req.backbone, req.weights, req.image_size).to(device)
    backbone.precision = precision
    backbone.runtime = runtime_for(backbone.kind, device.type, precision)
    for card in methods:
        resolve_for_backbone(card, backbone)
    # same outputs, half the weight memory; not under a compiled runtime, which rounds
    # the fp32 weights to bf16 once, after folding batch norm into them
    if (
        precision == "bf16"
        and backbone.runtime == TORCH_RUNTIME
        and not any(trains_backbone(card) for card in methods)
    ):
        backbone.store_matmul_weights_in_bf16()
    if scenario.params.get("normalize", "none") == "backbone":
        use_weights_normalization(backbone)
    workers = Loading.for_run(device, data.on_disk).workers
    store = SharedFeatureStore(
        device,
        precision=precision,
        progress=req.progress,
        workers=workers,
        batch_size=32 if device.type == "cpu" else 256,
        device_key=device_key(device, req.deterministic),
    )
    return Shared(data, backbone, store)


@dataclass
class PlannedRun:
    card: Card
    seed: int
    path: Path
    scenario: Card  # as this run sees it (:func:`cl_bench.cards.protocol.run_scenario`)


def plan_runs(
    req: RunRequest,
    methods: list[Card],
    scenario: Card,
    backbone: Backbone,
    precision: str,
    data: ImageData,
    device: dict | None = None,
) -> list[PlannedRun]:
    """Every method x seed of the request with its result path, seed-major (``device``:
    :func:`~cl_bench.engine.environment.device_key` of the device the runs go to)."""
    return [
        PlannedRun(
            card,
            seed,
            results.run_path(
                req.out,
                scenario.name,
                card.name,
                seed,
                resolved_config(
                    card, run_scenario(card, scenario), backbone, precision, data, device
                ),
            ),
            run_scenario(card, scenario),
        )
        for seed in req.seeds
        for card in methods
    ]


def describe(
    req: RunRequest,
    methods: list[Card],
    scenario: Card,
    shared: Shared,
    device: str,
    precision: str,
) -> list[str]:
    """The lines printed before a scenario's runs start."""
    lines = []
    backbone = shared.backbone
    if backbone.weights == "random":
        lines.append(
            f"warning: {backbone.name} has RANDOM weights (asked for with --weights "
            "random): its numbers are change detectors, not results; the result "
            "files record it."
        )
    lines.append(
        f"cl-bench: {', '.join(c.name for c in methods)} on {scenario.name} "
        f"({shared.data.n_classes} classes), backbone {backbone.name} "
        f"[{backbone.weights}], seeds {', '.join(map(str, req.seeds))}, "
        f"{device}/{precision}"
        + "".join(f", {s}" for s in req.sets if s.partition("=")[0].strip() in req.sweep)
        + (
            f", frozen features through {backbone.runtime}"
            if backbone.runtime != TORCH_RUNTIME and any(map(uses_feature_cache, methods))
            else ""
        )
    )
    return lines


def device_label(device: torch.device) -> str:
    """``cpu``, or ``cuda:0 (NVIDIA H200, sm_90)`` for the line before the runs."""
    if device.type != "cuda":
        return device.type
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = torch.cuda.get_device_capability(index)
    return f"cuda:{index} ({torch.cuda.get_device_name(index)}, sm_{cap[0]}{cap[1]})"


def done_line(name: str, seed: int, record: dict, path: Path) -> str:
    return (
        f"{name} seed {seed}: avg {record['avg_acc']:.2f}  last "
        f"{record['last_acc']:.2f}  ({record['timing']['total_s']:.1f} s) -> {path}"
    )


def _loaded(req: RunRequest, determinism: bool) -> tuple:
    """The request checked, its device and precision resolved (and, with
    ``determinism``, the process's determinism set, before cuBLAS starts), the memory
    estimate checked before the backbone is on the device, then its data, backbone and
    feature store loaded: (methods, scenario, device, precision, shared)."""
    methods, scenario = check_request(req)
    device = resolve_device(req.device)
    if determinism:
        make_deterministic(req.threads, req.deterministic, device)
    precision = resolve_precision(req.precision, device)
    check_memory(
        methods,
        scenario,
        req.backbone,
        req.image_size,
        device.type,
        device=device,
        precision=precision,
    )
    shared = load_shared(req, scenario, methods, device, precision)
    return methods, scenario, device, precision, shared


def _planned(req: RunRequest, methods, scenario, precision: str, shared) -> list:
    """Every method x seed's run with its result path, each path checked to be free for
    a result file."""
    runs = plan_runs(
        req, methods, scenario, shared.backbone, precision, shared.data, shared.store.device_key
    )
    results.check_run_files(req.out, [r.path for r in runs])
    return runs


def execute(
    req: RunRequest, echo: Callable[[str], None] = print, failed: list[str] | None = None
) -> list[dict]:
    """Run every missing method x seed of the request in this process; return its
    results (a run another process is computing right now is skipped and left out).
    With ``failed``, a run that meets bad data only while it runs (an image spoiled
    after the decode check, keeping its size and time) fails alone: its failure is
    recorded beside its result, it is listed in ``failed`` and the next run starts."""
    methods, scenario, device, precision, shared = _loaded(req, determinism=True)
    for line in describe(req, methods, scenario, shared, device_label(device), precision):
        echo(line)
    runs = _planned(req, methods, scenario, precision, shared)
    results.write_grid(req.out, [r.path for r in runs])
    out = []
    for run in runs:
        name, seed, path = run.card.name, run.seed, run.path
        there = results.found(path)
        if there.state == "done":
            echo(f"  skip {name} seed {seed}: finished ({path})")
            out.append(there.record)
            continue
        if there.state == "stale":
            echo(f"  stale {name} seed {seed}: {'; '.join(there.why)}; computing it again")
        try:
            attempt = results.run_once(
                path,
                functools.partial(
                    run_one,
                    run.card,
                    run.scenario,
                    shared.data,
                    shared.backbone,
                    shared.store,
                    seed,
                    device,
                    req.progress,
                    path,
                    req.log,
                    req.loggers,
                    req.plugins,
                    req.config_file,
                ),
            )
        except UserError as e:
            release_memory(device)
            if failed is None:
                raise
            echo(f"  FAILED {name} seed {seed}: {e.paragraph()}")
            failed.append(f"{scenario.name}/{name} seed {seed}")
            continue
        if attempt.state == "running":
            echo(f"  skip {name} seed {seed}: running in {results.held_by(attempt.holder)}")
            continue
        if attempt.state == "done":
            echo(f"  skip {name} seed {seed}: finished ({path})")
        else:
            echo(f"  {done_line(name, seed, attempt.record, path)}")
        out.append(attempt.record)
    return out


def preflight(reqs: list[RunRequest]) -> None:
    """Check every request, load each one's data and backbone once (then drop them) and
    plan its result paths, so that a bad setting, dataset, weight or result path of the
    last one stops the command before the first run writes anything, as it does for a
    single request."""
    for req in reqs:
        methods, scenario, _, precision, shared = _loaded(req, determinism=False)
        _planned(req, methods, scenario, precision, shared)
