"""Memory estimated before a run: a command whose runs cannot fit is refused up front.

Some settings scale memory far past a machine: RanPAC's ``M`` (its Gram matrix is
M x M in float64: 12.8 GB at M = 40,000), the image size (one 100,000-pixel image is
120 GB in float32), a scenario's class count. Left to run, such a setting swaps the
machine to a halt or fails in the allocator with a traceback, after a ``.failed``
record is written. Here the dominant allocations of each run are estimated from the
resolved cards, the scenario card and the backbone's architecture (built on the
``meta`` device: shapes, no storage) before any data or weight loads, in the run
(:func:`cl_bench.engine.runner.execute`) and in the dry run alike; a run whose
estimate exceeds the machine's available memory is refused with the estimate and
the setting to change.

The estimate counts what the engine allocates for every run (the backbone's weights,
one batch of images through it, the images a generated scenario holds, the cached
features, a classifier over every class) and what the method declares through
:meth:`cl_bench.contract.Method.memory` (Gram matrices, adapter sets, prototypes,
prompt pools). Every term is a lower bound of what it names (an activation counts
one layer's input and output, not everything autograd keeps), so a refusal is never
wrong; a run that passes may still need more.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import replace

import psutil
import torch

from cl_bench.backbones.base import Backbone
from cl_bench.cards.card import Card
from cl_bench.cards.strategy import strategy_of
from cl_bench.contract import Allocation, Inputs, Workload, spec_of
from cl_bench.contract.memory import FLOAT
from cl_bench.errors import UserError

GB = 1e9
SHOWN = 3  # allocations named in a refusal


def extraction_batch(device_type: str) -> int:
    """Images per backbone pass when features are extracted (the feature store's batch)."""
    return 256 if device_type == "cuda" else 32


@functools.lru_cache(maxsize=16)
def architecture(name: str, image_size: int | None) -> Backbone:
    """Backbone ``name`` on the meta device (the weights do not change its shapes)."""
    from cl_bench.backbones.planned import planned_backbone
    return planned_backbone(name, "random", image_size)


@functools.lru_cache(maxsize=16)
def backbone_profile(name: str, image_size: int | None) -> tuple[int, int]:
    """(weight bytes, activation bytes per image) of backbone ``name``: a forward pass
    of one image on the meta device records every leaf module's output; the largest,
    with its input, is what one layer holds at once."""
    backbone = architecture(name, image_size)
    model = backbone.model
    weights = sum(t.numel() for t in [*model.parameters(), *model.buffers()]) * FLOAT
    largest = [0]

    def hook(module, inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            largest[0] = max(largest[0], output.numel())
    handles = [m.register_forward_hook(hook) for m in model.modules()
               if not list(m.children())]
    try:
        with torch.no_grad():
            model(torch.empty(1, 3, backbone.input_size, backbone.input_size, device="meta"))
    finally:
        for handle in handles:
            handle.remove()
    return weights, 2 * largest[0] * FLOAT


def capped(batch: int, images: int) -> int:
    """A batch holds at most the images it is drawn from (0 images: not known)."""
    return min(batch, images) if images else batch


def engine_allocations(card: Card, work: Workload, device_type: str, weights: int,
                       activation: int, scenario_bytes: int) -> list[Allocation]:
    """What the engine allocates for a run of ``card``, whatever the method."""
    spec = spec_of(strategy_of(card))
    params = card.params
    batch = capped(extraction_batch(device_type) if spec.reads_feature_cache else 0,
                   work.train_images + work.test_images)
    scales = "--image-size"
    if spec.inputs is not Inputs.FEATURES:  # the method's own passes: a task, the test set
        batch = max(batch, capped(params.get("batch_size", 0), work.train_images // work.n_tasks),
                    *(capped(params.get(s.key) or 0, work.test_images)
                      for s in spec.protocol if s.batch_size))
        scales = f"--image-size or {card.name}.batch_size"
    pixels = 3 * work.image_size ** 2 * FLOAT
    out = [Allocation("the backbone's weights" + " and its trained copy" * spec.trains_backbone,
                      weights * (1 + spec.trains_backbone), "--image-size or --backbone"),
           Allocation(f"a batch of {batch} images through the backbone, at "
                      f"{work.image_size} px", batch * (pixels + activation), scales),
           Allocation("the scenario's images", scenario_bytes, "scenario.dataset_args"),
           Allocation("a classifier over every class", work.n_classes * work.dim * FLOAT,
                      "scenario.dataset_args.n_classes")]
    if spec.reads_feature_cache:
        n = work.train_images + work.test_images
        out.append(Allocation("the cached features", n * work.dim * 2, "scenario.dataset_args"))
    return out


def estimate(card: Card, work: Workload, device_type: str, weights: int, activation: int,
             scenario_bytes: int) -> list[Allocation]:
    """Every dominant allocation of a run of ``card``, largest first."""
    own = [replace(a, setting=f"{card.name}.{a.setting}")  # hooks name their own keys
           for a in strategy_of(card).memory(card.params, work)]
    found = [*engine_allocations(card, work, device_type, weights, activation, scenario_bytes),
             *own]
    return sorted((a for a in found if a.nbytes > 0), key=lambda a: -a.nbytes)


def available(device_type: str) -> int:
    """Bytes this machine can still give a run: the free RAM, plus the free memory of
    the GPU when the runs use it (an allocation fits in one or the other)."""
    free = psutil.virtual_memory().available
    if device_type == "cuda" and torch.cuda.is_available():
        free += torch.cuda.mem_get_info()[0]
    return free


def task_count(n_classes: int, init_cls: int, increment: int) -> int:
    """The number of tasks :func:`cl_bench.scenarios.order.task_split` makes (init_cls
    classes, then increment each, a smaller last task for the rest), without building
    the split: the class count may be huge here, which is what is being checked."""
    return 1 + max(0, -(-(n_classes - init_cls) // increment))


def check_memory(methods: list[Card], scenario: Card, backbone: str, image_size: int | None,
                 device_type: str) -> None:
    """Refuse (``UserError``) the first run whose estimate exceeds :func:`available`,
    naming the estimate, its largest allocations and the setting to change."""
    from cl_bench.cards.resolve import resolve_for_backbone
    from cl_bench.scenarios.footprint import class_count, footprint
    planned = architecture(backbone, image_size)
    weights, activation = backbone_profile(backbone, image_size)
    seen = footprint(scenario)
    n_classes = class_count(scenario) or 0
    n_tasks = task_count(n_classes, scenario.params["init_cls"], scenario.params["increment"])
    blocks = len(getattr(planned.model, "blocks", ())) if planned.kind == "vit" else 0
    work = Workload(n_classes, n_tasks, seen.train_images, seen.test_images, planned.dim,
                    blocks, planned.input_size)
    free = available(device_type)
    for card in methods:
        resolved = copy.deepcopy(card)
        if resolved.params.get("n_tasks") == 0:  # "the stream's task count"
            resolved.params["n_tasks"] = n_tasks
        resolve_for_backbone(resolved, planned)
        found = estimate(resolved, work, device_type, weights, activation, seen.image_bytes)
        total = sum(a.nbytes for a in found)
        if total > free:
            raise UserError(refusal(card.name, found, total, free))


def size_text(nbytes: int) -> str:
    """Bytes in GB (MB below one GB), for a message."""
    return f"{nbytes / GB:,.1f} GB" if nbytes >= GB else f"{nbytes / 1e6:,.1f} MB"


def refusal(method: str, found: list[Allocation], total: int, free: int) -> str:
    """The one paragraph of a refused run: the estimate, its largest parts (those of at
    least 1 % of it) and the setting of the largest to change."""
    shown = [f"{a.what}: {size_text(a.nbytes)} (set by {a.setting})"
             for a in found[:SHOWN] if a.nbytes * 100 >= total]
    return (f"A run of {method} needs at least {size_text(total)} of memory, but this "
            f"machine has {size_text(free)} available. The largest part"
            f"{'s' * (len(shown) > 1)}: {'; '.join(shown)}. Lower {found[0].setting} (or run "
            "on a machine with more memory); nothing was run or written.")
