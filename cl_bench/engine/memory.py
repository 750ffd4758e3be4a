"""Memory estimated before a run: a command whose runs cannot fit is refused up front.

Some settings scale memory far past a machine: RanPAC's ``M`` (its Gram matrix is
M x M in float64: 12.8 GB at M = 40,000), the image size (one 100,000-pixel image is
120 GB in float32), a scenario's class count, a training batch through a ViT (L2P at
batch 128 keeps 10.0 GB for its backward pass in fp32). Left to run, such a setting
swaps the machine to a halt or fails in the allocator with a traceback, after a
``.failed`` record is written. Here the dominant allocations of each run are estimated
from the resolved cards, the scenario card and the backbone's architecture (built on
the ``meta`` device: shapes, no storage) before any data or weight loads, in the run
(:func:`cl_bench.engine.runner.execute`) and in the dry run alike; a run whose
estimate exceeds what its budget has free is refused with the estimate, its largest
parts, that free memory and the setting to change.

Two budgets when the runs go to a GPU, neither counted towards the other (a tensor
lives in one of them; the GPU cannot borrow the RAM): the GPU's, with everything the
run computes with (the backbone's weights and any trained copy, the batch through the
backbone and what training keeps of it for the backward pass, what the method
declares: prompts, adapter sets, Gram matrices, the optimizer state of what it
trains; the classifier), against the GPU's free memory as the checking process sees
it (:func:`gpu_free_bytes`); and the RAM's, with what stays in RAM
(:attr:`~cl_bench.contract.Allocation.host`: the scenario's images, the cached
features and their augmented views), against the available RAM. On the CPU every
allocation is RAM and there is one budget.

The estimate counts what the engine allocates for every run (the backbone's weights,
one batch of images through it, the images a generated scenario holds, the cached
features, a classifier over every class) and what the method declares through
:meth:`cl_bench.contract.Method.memory`, the training step included
(:func:`cl_bench.contract.memory.backward_pass`: what autograd keeps per block
that gradients flow through). Every term is a lower bound of what it names (a
forward-only pass counts one layer's input and output; the backward pass only the
tensors every attention kernel keeps; activations at 2 bytes where the precision may
be half), and terms that are never held at once are not added (a training batch and
the largest forward-only batch: the larger counts), so a refusal is never wrong; a run
that passes may still need more.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, replace

import psutil
import torch

from cl_bench.backbones.base import Backbone
from cl_bench.cards.card import Card
from cl_bench.cards.resolve import hook
from cl_bench.cards.strategy import strategy_of
from cl_bench.contract import Allocation, Inputs, Workload, spec_of
from cl_bench.contract.memory import FLOAT, HALF, capped
from cl_bench.engine.environment import cpu_has_bf16
from cl_bench.errors import UserError

GB = 1e9
SHOWN = 3  # allocations named in a refusal
PRECISION_BYTES = {"fp32": FLOAT, "bf16": HALF, "fp16": HALF}


def extraction_batch(device_type: str) -> int:
    """Images per backbone pass when features are extracted (the feature store's batch)."""
    return 256 if device_type == "cuda" else 32


@functools.lru_cache(maxsize=16)
def architecture(name: str, image_size: int | None) -> Backbone:
    """Backbone ``name`` on the meta device (the weights do not change its shapes)."""
    from cl_bench.backbones.planned import planned_backbone

    return planned_backbone(name, "random", image_size)


@dataclass(frozen=True)
class Profile:
    """What the estimate reads off a backbone's architecture: the bytes of its
    weights in fp32 and its parameter count; the elements one forward-only layer holds
    at once per image (the largest leaf module's output, with its input); and on a
    ViT the tokens a block sees (patches and prefix tokens) and its MLP's hidden width
    (0 on a CNN)."""

    weights: int
    parameters: int
    activation: int
    tokens: int
    hidden: int


@functools.lru_cache(maxsize=16)
def backbone_profile(name: str, image_size: int | None) -> Profile:
    """The :class:`Profile` of backbone ``name``: a forward pass of one image on the
    meta device records every leaf module's output."""
    backbone = architecture(name, image_size)
    model = backbone.model
    parameters = sum(t.numel() for t in model.parameters())
    weights = (parameters + sum(t.numel() for t in model.buffers())) * FLOAT
    largest = [0]

    def hook(module, inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            largest[0] = max(largest[0], output.numel())

    handles = [m.register_forward_hook(hook) for m in model.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            model(torch.empty(1, 3, backbone.input_size, backbone.input_size, device="meta"))
    finally:
        for handle in handles:
            handle.remove()
    tokens = hidden = 0
    if backbone.kind == "vit":
        tokens = model.patch_embed.num_patches + model.num_prefix_tokens
        fc1 = getattr(model.blocks[0].mlp, "fc1", None)
        hidden = fc1.out_features if isinstance(fc1, torch.nn.Linear) else 0
    return Profile(weights, parameters, 2 * largest[0], tokens, hidden)


def activation_bytes(precision: str | None, device_type: str) -> int:
    """Bytes an activation takes at least under ``precision``: 4 in fp32, 2 in bf16
    or fp16 (autocast keeps half-precision copies; what it keeps in fp32 is counted at
    2 as well, a lower bound). Not known (None, ``auto``): the least a run on
    ``device_type`` may use, 2 on a GPU or on a CPU with bf16 units, else 4."""
    if precision in PRECISION_BYTES:
        return PRECISION_BYTES[precision]
    return HALF if device_type == "cuda" or cpu_has_bf16() else FLOAT


def image_bytes(work: Workload) -> int:
    """Bytes of one image as the model reads it (3 channels, float32)."""
    return 3 * work.image_size**2 * FLOAT


def forward_batch(card: Card, work: Workload, device_type: str, profile: Profile) -> Allocation:
    """The largest batch a run of ``card`` passes through the backbone without
    training: feature extraction, the method's own passes (a task, the test set)."""
    spec = spec_of(strategy_of(card))
    params = card.params
    batch = capped(
        extraction_batch(device_type) if spec.reads_feature_cache else 0,
        work.train_images + work.test_images,
    )
    scales = "--image-size"
    if spec.inputs is not Inputs.FEATURES:
        batch = max(
            batch,
            capped(params.get("batch_size", 0), work.train_images // work.n_tasks),
            *(
                capped(params.get(s.key) or 0, work.test_images)
                for s in spec.protocol
                if s.batch_size
            ),
        )
        scales = f"--image-size or {card.name}.batch_size"
    per_image = image_bytes(work) + profile.activation * work.activation_bytes
    return Allocation(
        f"a batch of {batch} images through the backbone, at {work.image_size} px",
        batch * per_image,
        scales,
    )


def training_batch(card: Card, work: Workload, steps: list[Allocation]) -> Allocation:
    """A training batch of ``card``'s images and what its backward pass keeps
    (``steps``, declared by the method's hook, setting already prefixed)."""
    batch = capped(card.params["batch_size"], work.train_images // work.n_tasks)
    return Allocation(
        f"a training batch of {batch} images at {work.image_size} px and "
        + " and ".join(a.what for a in steps),
        batch * image_bytes(work) + sum(a.nbytes for a in steps),
        steps[0].setting,
        backward=True,
        per_task=any(a.per_task for a in steps),
    )


def engine_allocations(
    card: Card, work: Workload, profile: Profile, scenario_bytes: int
) -> list[Allocation]:
    """What the engine allocates for a run of ``card`` beside its batches, whatever the
    method."""
    spec = spec_of(strategy_of(card))
    # under bf16 or fp16 the runner keeps the frozen matmul weights in half precision
    # (when no method trains the backbone): half the bytes at least
    frozen = profile.weights * work.activation_bytes // FLOAT
    out = [
        Allocation(
            "the backbone's weights" + " and its trained copy" * spec.trains_backbone,
            frozen + profile.weights * spec.trains_backbone,
            "--image-size or --backbone",
        ),
        Allocation("the scenario's images", scenario_bytes, "scenario.dataset_args", host=True),
        Allocation(
            "a classifier over every class",
            work.n_classes * work.dim * FLOAT,
            "scenario.dataset_args.n_classes",
        ),
    ]
    if spec.reads_feature_cache:
        n = work.train_images + work.test_images
        out.append(
            Allocation("the cached features", n * work.dim * 2, "scenario.dataset_args", host=True)
        )
    return out


def estimate(
    card: Card, work: Workload, device_type: str, profile: Profile, scenario_bytes: int
) -> list[Allocation]:
    """Every dominant allocation of a run of ``card``, largest first. A training
    batch (with what its backward pass keeps) and the largest forward-only batch are
    never held at once: the larger of the two counts."""
    own = [
        replace(a, setting=f"{card.name}.{a.setting}")  # hooks name their own keys
        for a in declared_per_task(card, work)
    ]
    steps = [a for a in own if a.backward and a.nbytes > 0]
    passes = [forward_batch(card, work, device_type, profile)]
    if steps:
        passes.append(training_batch(card, work, steps))
    found = [
        *engine_allocations(card, work, profile, scenario_bytes),
        max(passes, key=lambda a: a.nbytes),
        *(a for a in own if not a.backward),
    ]
    return sorted((a for a in found if a.nbytes > 0), key=lambda a: -a.nbytes)


def declared_per_task(card: Card, work: Workload) -> list[Allocation]:
    """What ``card``'s hook declares under ``work``, each allocation that grows with the
    task count marked ``per_task``: the hook is asked again at twice the tasks (the
    classes and images unchanged), and an allocation larger there is one the stream's
    length scales (a module, copy or statistic kept per task)."""
    with hook(card, "memory"):  # a strategy of your own: its error as a paragraph
        declared = strategy_of(card).memory(card.params, work)
        longer = strategy_of(card).memory(
            card.params, replace(work, n_tasks=2 * max(work.n_tasks, 1))
        )
    if len(longer) != len(declared):  # a hook whose list depends on the task count
        return declared
    return [
        replace(a, per_task=True) if b.nbytes > a.nbytes else a
        for a, b in zip(declared, longer, strict=True)
    ]


def ram_available() -> int:
    """Bytes of RAM this machine can still give a run."""
    return psutil.virtual_memory().available


def gpu_free_bytes(device: torch.device | str | None) -> int | None:
    """Bytes the GPU ``device`` (None: the current one) can still give this process:
    what the driver has free (``torch.cuda.mem_get_info``: other processes' memory is
    not free) and what this process's caching allocator holds unused. None where
    torch has no GPU to ask."""
    if not torch.cuda.is_available():
        return None
    free = torch.cuda.mem_get_info(device)[0]
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


@dataclass(frozen=True)
class Budget:
    """The memory a group of a run's allocations must fit in: its free bytes, which
    allocations it holds (``host``: the RAM ones, True; the GPU ones, False; all,
    None), and how a refusal names it."""

    free: int
    host: bool | None
    needs: str  # "of GPU memory"
    has: str  # "the GPU has {} free"
    instead: str  # "a GPU with more free memory"

    def holds(self, allocation: Allocation) -> bool:
        return self.host is None or allocation.host is self.host


def budgets(device_type: str, device: torch.device | str | None) -> list[Budget]:
    """The budgets of runs on ``device_type``: the RAM on a CPU; on a GPU the GPU's
    free memory (when torch can ask it) and, apart, the RAM."""
    if device_type != "cuda":
        return [
            Budget(
                ram_available(),
                None,
                "of memory",
                "this machine has {} available",
                "a machine with more memory",
            )
        ]
    out = [
        Budget(
            ram_available(),
            True,
            "of RAM",
            "this machine has {} of RAM available",
            "a machine with more RAM",
        )
    ]
    free = gpu_free_bytes(device)
    if free is not None:
        index = torch.device(device).index if device is not None else None
        name = "the GPU" if index is None else f"the GPU cuda:{index}"
        out.insert(
            0,
            Budget(
                free, False, "of GPU memory", name + " has {} free", "a GPU with more free memory"
            ),
        )
    return out


def task_count(n_classes: int, init_cls: int, increment: int) -> int:
    """The number of tasks :func:`cl_bench.scenarios.order.task_split` makes (init_cls
    classes, then increment each, a smaller last task for the rest), without building
    the split: the class count may be huge here, which is what is being checked."""
    return 1 + max(0, -(-(n_classes - init_cls) // increment))


def workload(
    scenario: Card, backbone: str, image_size: int | None, nbytes: int = FLOAT
) -> Workload:
    """The :class:`Workload` of runs on ``scenario`` with ``backbone``, activations at
    ``nbytes`` each (:func:`activation_bytes`)."""
    from cl_bench.scenarios.footprint import class_count, footprint

    planned = architecture(backbone, image_size)
    profile = backbone_profile(backbone, image_size)
    seen = footprint(scenario)
    n_classes = class_count(scenario) or 0
    n_tasks = task_count(n_classes, scenario.params["init_cls"], scenario.params["increment"])
    blocks = len(getattr(planned.model, "blocks", ())) if planned.kind == "vit" else 0
    return Workload(
        n_classes,
        n_tasks,
        seen.train_images,
        seen.test_images,
        planned.dim,
        blocks,
        planned.input_size,
        profile.tokens,
        profile.hidden,
        profile.parameters,
        nbytes,
    )


def check_memory(
    methods: list[Card],
    scenario: Card,
    backbone: str,
    image_size: int | None,
    device_type: str,
    device: torch.device | str | None = None,
    precision: str | None = None,
    limits: list[Budget] | None = None,
) -> None:
    """Refuse (``UserError``) the first run whose estimate exceeds a budget
    (:func:`budgets`), naming the estimate, its largest allocations, the budget's free
    memory and the setting to change. ``device``: the GPU the runs use (None: the
    current one); ``precision``: the resolved precision of the runs (None: not known,
    :func:`activation_bytes`). The GPU's free memory is read here, so call it in the
    process that runs, before it puts anything of the run on the GPU. ``limits``: the
    budgets of runs elsewhere instead (a SLURM plan's GPU type, before the jobs
    queue)."""
    limits = limits or budgets(device_type, device)
    for card in methods:
        resolved, work, found = run_estimate(
            card, scenario, backbone, image_size, device_type, precision
        )
        for budget in limits:
            held = [a for a in found if budget.holds(a)]
            total = sum(a.nbytes for a in held)
            if total > budget.free:
                raise UserError(refusal(resolved, held, total, budget, work))


def run_estimate(
    card: Card,
    scenario: Card,
    backbone: str,
    image_size: int | None,
    device_type: str,
    precision: str | None = None,
) -> tuple[Card, Workload, list[Allocation]]:
    """The estimate of one run of ``card`` on ``scenario`` (:func:`estimate`, largest
    first) with the card as the run resolves it (``n_tasks: 0`` as the stream's task
    count, values for the backbone) and the :class:`Workload` it was made for; the
    card itself is left as it is."""
    from cl_bench.cards.resolve import resolve_for_backbone
    from cl_bench.scenarios.footprint import footprint

    planned = architecture(backbone, image_size)
    profile = backbone_profile(backbone, image_size)
    work = workload(scenario, backbone, image_size, activation_bytes(precision, device_type))
    resolved = copy.deepcopy(card)
    if resolved.params.get("n_tasks") == 0:  # "the stream's task count"
        resolved.params["n_tasks"] = work.n_tasks
    resolve_for_backbone(resolved, planned)
    found = estimate(resolved, work, device_type, profile, footprint(scenario).image_bytes)
    return resolved, work, found


def size_text(nbytes: int) -> str:
    """Bytes in GB (MB below one GB), for a message."""
    return f"{nbytes / GB:,.1f} GB" if nbytes >= GB else f"{nbytes / 1e6:,.1f} MB"


def refusal(card: Card, found: list[Allocation], total: int, budget: Budget, work: Workload) -> str:
    """The one paragraph of a refused run: the estimate, its largest parts (those of at
    least 1 % of it), the budget's free memory and the setting of the largest to
    change; when that is a training step and the method checkpoints activations
    (``checkpoint_blocks``, of the ``work.blocks`` ViT blocks), that setting too; when
    it grows with the task count (``per_task``), fewer tasks too."""
    shown = [
        f"{a.what}: {size_text(a.nbytes)} (set by {a.setting}"
        + (f", times {work.n_tasks} tasks)" if a.per_task else ")")
        for a in found[:SHOWN]
        if a.nbytes * 100 >= total
    ]
    fix = f"Lower {found[0].setting} (or run on {budget.instead})"
    checkpointed = card.params.get("checkpoint_blocks")
    if found[0].backward and checkpointed is not None and checkpointed < work.blocks:
        fix = (
            f"Lower {found[0].setting}, raise {card.name}.checkpoint_blocks (now "
            f"{checkpointed}, at most {work.blocks}: those ViT blocks are recomputed in the "
            f"backward pass instead of kept), or run on {budget.instead}"
        )
    elif found[0].per_task:
        fix = (
            f"Lower {found[0].setting}, split the stream into fewer tasks ({work.n_tasks} "
            "now: raise scenario.increment, and scenario.init_cls with it), or run on "
            f"{budget.instead}"
        )
    return (
        f"A run of {card.name} needs at least {size_text(total)} {budget.needs}, but "
        f"{budget.has.format(size_text(budget.free))}. The largest part"
        f"{'s' * (len(shown) > 1)}: {'; '.join(shown)}. {fix}; nothing was run or "
        "written."
    )
