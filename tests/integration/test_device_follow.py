"""Every tensor a method builds follows the run's device, for every built-in method card.

Nothing here can run CUDA, so PyTorch's ``meta`` device stands in for it: a meta tensor
has a shape and no storage. Each card is built as ``runner.train_and_evaluate``'s
``build()`` builds it (card loaded, cheap settings through ``Card.override`` as ``--set``
gives them, ``n_tasks: 0`` filled in as ``load_shared`` does, ``resolve_for_backbone``,
the class of ``strategy_of(card)``, the runner's plugins, ``device=meta``) on a random
ViT-Tiny at 32 px moved to meta as ``load_shared`` moves the run's backbone, and driven
by ``contract.drive``, the runner's loop, over a tiny stream (4 classes in 2 tasks of 2,
4 training images per task, one batch): the stream's data stay on the host and
Avalanche moves each mini-batch to the device, as in a run. Then:

1. **the walk** (:func:`walk`) finds every tensor reachable from the strategy: the
   model's parameters, buffers and its modules' plain tensor attributes, every plugin's
   tensors and the strategy's own (the optimizer's state), recursively into dicts,
   lists, tuples, modules and dataclass fields and one level into other objects'
   ``__dict__``; after construction (and the ``model.to(device)`` that Avalanche's
   ``train()`` starts with: every strategy builds its model on the host and leaves the
   move to it), after each task, after the evaluation, each must be on meta, and the
   assertion names the offenders by attribute path. What stays on the host on purpose
   passes through :data:`HOST_SIDE` (path pattern, the model class it applies to,
   reason): the recorder's label -> task table (host bookkeeping of the accuracy
   matrix); Adam's step counts (CPU scalars by torch.optim's design); the class
   bookkeeping of the prompt, adapter and fine-tuning models (``current``, ``unseen``,
   ``task_of_class``, ``active``: checkpointed and read by Python; forwards use device
   copies, which are checked) and what those copies were made from; the prompt models'
   0-dim ``regularizer`` placeholder, replaced before any loss reads it. The walk must
   also reach the state each method grows (:data:`GROWN`: a second task's module, EWC's
   importances, ...), on meta and with its shape;
2. **every op runs under** :class:`SameDevice`. Meta checks devices in most ops, but
   not in the matrix products (``mm``, ``addmm``, ``bmm``, ``linear``, ``einsum``), nor in
   ``index_select`` or an in-place ``add_``: there a CPU tensor meets a meta one silently
   (:func:`test_same_device_checks_what_meta_lets_through`). SameDevice applies CUDA's
   rule to every aten op, so a tensor made without ``device=`` that meets the device
   fails where it would on a GPU;
3. a probe plugin records the device and shape (never a value: meta has none) of what
   the loop computes: each training forward's logits, the loss and the gradients, and
   the evaluation's logits, batch x the classes the method scores
   (:data:`TRAIN_STEPS`, :data:`EVAL_COLUMNS`).

Where meta cannot follow the runner's path. A value read on the host (``.item()``,
``bool()``, ``int()``, ``.cpu()``) or a shape that depends on values (``nonzero``, a
boolean-mask index) has no answer on meta; on a GPU it is a sync, nothing else. A method
whose path reads one stops there: :data:`STOPS_ON_META` names the function and why, and
the test asserts that the drive stops exactly there, with meta's own refusal (not a
device mismatch), after the first task's training steps ran and were checked as above
(forward, loss, backward and optimizer step, on meta). A method that gets further fails
the test until its entry goes. Two of the runner's plugins read values by design and are
detached once the construction walk has seen them: the
:class:`~cl_bench.engine.recording.Recorder` (the loss in its progress bar, predictions
copied to the host) and :class:`~cl_bench.engine.finite.FiniteWatch` (``bool`` of
``isfinite``); :class:`~cl_bench.accounting.count.TrainFlops` stays.

The ViT keeps 5 of its 12 blocks (the prompt methods prompt blocks 0-4): on meta every op
goes through Python meta kernels, about ten times slower than this tiny model runs on the
CPU, and the blocks are all the same code.

On the CPU, :func:`test_grown_state_on_the_cpu` drives the methods that stop on meta over
both tasks. That cannot fail for a device reason (everything is on the CPU), but it
walks the state they grow only past their stop (prototypes, class statistics, ridge
statistics, per-task adapter copies), so the walk is shown to reach it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import re
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from avalanche.core import SupervisedPlugin
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.data import DataLoader

import cl_bench
from cl_bench.accounting.count import TrainFlops
from cl_bench.backbones import load_backbone
from cl_bench.backbones.base import Backbone
from cl_bench.cards.catalogue import METHODS_DIR, load_method
from cl_bench.cards.resolve import resolve_for_backbone
from cl_bench.cards.strategy import strategy_of
from cl_bench.contract import AdaptedStream, Bookkeeping, Inputs, drive, spec_of
from cl_bench.engine.finite import FiniteWatch
from cl_bench.engine.recording import Recorder
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.scenarios.loaders import synthetic
from cl_bench.scenarios.stream import Stream, build_stream
from cl_bench.scenarios.transforms import ToModelInput
from cl_bench.strategies.blocks.adapter_template import AdapterModel
from cl_bench.strategies.blocks.backbone_copy import FinetuneNet
from cl_bench.strategies.blocks.heads import CosineClassifier
from cl_bench.strategies.blocks.prompt_template import PromptModel

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

aten = torch.ops.aten
META, CPU = torch.device("meta"), torch.device("cpu")
METHODS = sorted(p.stem for p in METHODS_DIR.glob("*.yaml"))
VIT, SIZE, BLOCKS, D = "vit_tiny_patch16_224", 32, 5, 192
N_CLASSES, SIZES, TRAIN_PER_CLASS, TEST_PER_CLASS = 4, [2, 2], 2, 1
# where a card has the setting, as --set gives it: one pass, one batch per task, the
# random projections (MiN, RanPAC) and the classifier alignment (MOS, TUNA) small
CHEAP = {
    "epochs": 1,
    "init_epochs": 1,
    "fit_epochs": 1,
    "batch_size": 8,
    "eval_batch_size": 8,
    "fit_batch_size": 8,
    "buffer_size": 64,
    "M": 64,
    "ca_epochs": 1,
    "ca_samples": 1,
}
CHEAP_FOR = {"sldc": {"ca_samples": 2}}  # its bound: a sample's covariance needs two

# method -> (the function where the runner's path stops on meta, why)
STOPS_ON_META = {
    "aper": (
        "weights_digest",
        "after the first task the adapted backbone is named by a "
        "sha256 of its weights, which it reads on the host (.cpu())",
    ),
    "ranpac": (
        "weights_digest",
        "as APER's (and the ridge search after it reads each "
        "lambda's validation loss with float())",
    ),
    "ease": (
        "complete_prototypes",
        "the prototype completion loops up to int(max()) of "
        "the task of every class, a copy of it on the device",
    ),
    "mos": (
        "set_statistics",
        "a class gets statistics where (labels == c).any(), read on "
        "the device (and the test-time retrieval stops on `not active.any()`)",
    ),
    "tuna": (
        "class_gaussians",
        "a class's features are feats[labels == c], a boolean mask "
        "on the device: how many rows it selects is data",
    ),
    "care": ("class_gaussians", "as TUNA's: the class statistics select rows by a mask"),
    "lca": ("class_gaussians", "as TUNA's: the class statistics select rows by a mask"),
    "sldc": ("class_gaussians", "as TUNA's: the class statistics select rows by a mask"),
}
# meta's own refusals: a value read, or a shape that depends on values
META_REFUSALS = (
    "cannot be called on meta tensors",
    "Cannot copy out of meta tensor",
    "register_meta function for torch.nonzero()",
)

# (rows, columns) of the training logits, per step (a task's images are one batch): the
# cosine classifier over the seen classes (TOSCA), the first session's head over task 1's
# classes (APER, RanPAC), else every class of the run (the others at -inf); SimpleCIL
# trains nothing (0 epochs), Joint once, on both tasks' images
TASK = 2 * TRAIN_PER_CLASS
TRAIN_STEPS = {
    "tosca": [(TASK, 2), (TASK, 4)],
    "simplecil": [],
    "aper": [(TASK, 2)],
    "ranpac": [(TASK, 2)],
    "joint": [(2 * TASK, N_CLASSES)],
}
# columns of the evaluation logits after the last task (the methods that get there)
EVAL_COLUMNS = {m: N_CLASSES for m in METHODS if m not in STOPS_ON_META}


# method -> settings -> (path -> shape) of state the method grows on meta, which the walk
# must reach on the device: after both tasks and the evaluation, or where it stops on meta
GROWN = {
    "tosca": lambda p: {
        "model.luca.1.adapter.0.weight": (D // p["mlp_ratio"], D),  # task 2's
        "model.classifier.weight": (N_CLASSES, D),
        "model._stacked[1]['adapter.0.weight']": (2, D // p["mlp_ratio"], D),
        "model.routing": (N_CLASSES,),
    },
    "simplecil": lambda p: {"model.weight": (N_CLASSES, D)},  # the prototypes
    "l2p": lambda p: {"model.prompts": (p["pool_size"], p["length"], D)},
    "dualprompt": lambda p: {
        "model.e": (len(p["e_layers"]), 2, p["pool_size"], p["e_length"], D),
        "model.routing": (N_CLASSES,),
    },
    "coda-prompt": lambda p: {"model.p": (len(p["layers"]), p["pool_size"], p["length"], D)},
    "min": lambda p: {
        "model.sets.1.0.mu.weight": (p["hidden_dim"],) * 2,  # task 2's noise
        "model.prototypes": (2, D),
        "model.mix": (2,),
        "model.analytic.W": (p["buffer_size"], N_CLASSES),
    },
    "ewc": lambda p: {
        f"plugins.TrainableEWCPlugin.{store}[1]['head.weight']._data": (N_CLASSES, D)
        for store in ("importances", "saved_params")
    },
    "finetune": lambda p: {"model.head.weight": (N_CLASSES, D)},
    "joint": lambda p: {"model.head.weight": (N_CLASSES, D)},
    "ease": lambda p: {
        "model.proxy.weight": (2, D),
        "model.sets.0.adapters.0.down.weight": (p["ffn"], D),
    },
    "mos": lambda p: {"model.features": (TASK, D), "model.head.weight": (N_CLASSES, D)},
    "tuna": lambda p: {
        "model.head.0": (2, D),
        "model.universal.adapters.0.down.weight": (p["ffn"], D),
    },
    "aper": lambda p: {"model.adaptation.set.adapters.0.down.weight": (p["ffn"], D)},
    "ranpac": lambda p: {"model.W_rand": (D, p["M"]), "model.G": (p["M"], p["M"])},
    "care": lambda p: {
        "model.head.0": (2, D),
        "model.sets.0.layers.0.experts.0.down.weight": (p["expert_ffn"], D),
        "model.sets.0.layers.0.shared.down.weight": (p["shared_ffn"], D),
    },
    "lca": lambda p: {
        "model.head.0": (2, D),
        "model.base.adapters.0.down.weight": (p["ffn"], D),
    },
    "sldc": lambda p: {"model.head.0": (2, D), "model.head_scale.0": (2,)},
}
# what the methods of STOPS_ON_META grow past their stop, after two tasks on the CPU
GROWN_ON_CPU = {
    "ease": lambda p: {
        "model.protos": (N_CLASSES, 2, D),  # classes x subspaces x d
        "model.sets.1.adapters.0.down.weight": (p["ffn"], D),
    },
    "mos": lambda p: {
        "model.means": (N_CLASSES, D),
        "model.covs": (N_CLASSES, D, D),
        "model.protos": (N_CLASSES, D),
        "model.sets.1.adapters.0.down.weight": (p["ffn"], D),
    },
    "tuna": lambda p: {
        "model.means": (N_CLASSES, D),
        "model.covs": (N_CLASSES, D, D),
        "model.head.1": (2, D),
        "model.sets.1.adapters.0.down.weight": (p["ffn"], D),
        "model.universal.adapters.0.down.weight": (p["ffn"], D),
    },
    "care": lambda p: {
        "model.means": (N_CLASSES, D),
        "model.covs": (N_CLASSES, D),  # variances (ca_storage: variance)
        "model.head.1": (2, D),
        "model.sets.0.layers.0.experts.1.down.weight": (p["expert_ffn"], D),
        "model.sets.0.layers.0.routers.1.weight": (2, D),
    },
    "lca": lambda p: {
        "model.means": (N_CLASSES, D),
        "model.covs": (N_CLASSES, D, D),
        "model.head.1": (2, D),
        "model.sets.0.adapters.0.down.weight": (p["ffn"], D),
    },
    "sldc": lambda p: {
        "model.means": (N_CLASSES, D),
        "model.covs": (N_CLASSES, D, D),
        "model.head.1": (2, D),
        "model.unified_weight": (N_CLASSES, D),
    },
    "aper": lambda p: {"model.classifier.weight": (N_CLASSES, 2 * D)},  # [frozen, adapted]
    "ranpac": lambda p: {
        "model.G": (p["M"], p["M"]),
        "model.C": (p["M"], N_CLASSES),
        "model.W_o": (N_CLASSES, p["M"]),
    },
}


# What stays on the host on purpose: (path pattern, '*' for anything; the class
# strategy.model must be for it to apply, None for every method; why). A path names
# attributes from the strategy, plugins by their class.
BOOKKEEPING = (
    "class bookkeeping, saved in checkpoints and read by Python (tolist, "
    "boolean masks for host indexing); forwards use a device copy of it, made "
    "once per task and walked as everything else (model.on_device)"
)
HOST_SIDE = [
    (
        "plugins.Recorder.task_of_label",
        None,
        "the stream's label -> task table: the recorder indexes it with the predictions and "
        "labels it has copied to the host, to fill the accuracy matrix",
    ),
    (
        "*optimizer.state[*]['step']",
        None,
        "Adam's step count: torch.optim keeps it as a CPU scalar unless the optimizer is "
        "capturable or fused (PyTorch's design: no sync to read it)",
    ),
    ("model.current", PromptModel, "the current task's class mask: " + BOOKKEEPING),
    ("model.unseen", PromptModel, "the mask of classes not seen yet: " + BOOKKEEPING),
    (
        "model.regularizer",
        PromptModel,
        "the 0-dim placeholder of construction: each training forward replaces it before the "
        "loss reads it (and a 0-dim CPU tensor joins device tensors in any op)",
    ),
    ("model.current", AdapterModel, "the current task's classes: " + BOOKKEEPING),
    ("model.task_of_class", AdapterModel, "the task of every class row: " + BOOKKEEPING),
    ("model.active", FinetuneNet, "the head's mask of active classes: " + BOOKKEEPING),
    (
        "model.on_device._entries[*][0][*]",
        (PromptModel, AdapterModel, FinetuneNet),
        "the bookkeeping a device copy was made from, kept to tell when to make it again "
        "(the copies themselves, [1], are checked)",
    ),
]
# the strategy's handles on the stream's data (host tensors the loaders move per batch)
DATA_ATTRIBUTES = {
    "experience",
    "adapted_dataset",
    "dataloader",
    "current_eval_stream",
    "_eval_streams",
    "_experiences",
    "mbatch",
}
MODULE_INTERNALS = set(vars(nn.Module()))  # hooks and flags; its three dicts by name


# ----------------------------------------------------------------------------- the walk


def walk(strategy) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor reachable from ``strategy`` (module docstring),
    each once, under the first path that reaches it; the plugins first, each a root."""
    found: list[tuple[str, torch.Tensor]] = []
    tensors: set[int] = set()
    walked: dict[int, int] = {}  # object -> the most levels into plain objects left there

    def visit(obj, path: str, plain: int) -> None:
        if isinstance(obj, torch.Tensor):
            if id(obj) not in tensors:
                tensors.add(id(obj))
                found.append((path, obj))
            return
        if (
            obj is None
            or isinstance(obj, (str, bytes, int, float, bool, torch.device, torch.dtype))
            or walked.get(id(obj), -1) >= plain
        ):
            return
        walked[id(obj)] = plain
        if isinstance(obj, nn.Module):
            for group in ("_parameters", "_buffers", "_modules"):
                for name, value in getattr(obj, group).items():
                    visit(value, f"{path}.{name}", plain)
            for name, value in vars(obj).items():
                if name not in MODULE_INTERNALS:
                    visit(value, f"{path}.{name}", plain)
        elif isinstance(obj, torch.optim.Optimizer):
            # its parameters are the model's (walked there); its state is its own
            for i, state in enumerate(obj.state.values()):
                visit(state, f"{path}.state[{i}]", plain)
        elif isinstance(obj, dict):
            for i, (key, value) in enumerate(obj.items()):
                visit(value, f"{path}[{repr(key) if isinstance(key, (str, int)) else i}]", plain)
        elif isinstance(obj, (list, tuple)):
            for i, value in enumerate(obj):
                visit(value, f"{path}[{i}]", plain)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                visit(getattr(obj, f.name), f"{path}.{f.name}", plain)
        elif (
            plain > 0
            and hasattr(obj, "__dict__")
            and not isinstance(obj, type)
            and not inspect.isroutine(obj)
            and not inspect.ismodule(obj)
        ):
            for name, value in vars(obj).items():
                visit(value, f"{path}.{name}", plain - 1)

    walked[id(strategy)] = 1
    for plugin in strategy.plugins:
        walked[id(plugin)] = 1
        for name, value in vars(plugin).items():
            visit(value, f"plugins.{type(plugin).__name__}.{name}", 1)
    for name, value in vars(strategy).items():
        if name not in DATA_ATTRIBUTES and name != "plugins":
            visit(value, name, 1)
    return found


HOST_PATTERNS = [
    (re.compile(".*".join(map(re.escape, p.split("*"))) + r"\Z"), owner)
    for p, owner, _ in HOST_SIDE
]


def host_side(strategy, path: str) -> bool:
    """Whether :data:`HOST_SIDE` lets the tensor at ``path`` of ``strategy`` stay on the
    host."""
    return any(
        rx.match(path) and (owner is None or isinstance(strategy.model, owner))
        for rx, owner in HOST_PATTERNS
    )


def off_device(strategy, device: torch.device, when: str) -> list[str]:
    """Every walked tensor that is not on ``device`` and not let through by HOST_SIDE."""
    return [
        f"{when}: {path} on {t.device}, shape {tuple(t.shape)}"
        for path, t in walk(strategy)
        if t.device != device and not host_side(strategy, path)
    ]


def missing(strategy, expected: dict[str, tuple[int, ...]], device: torch.device) -> dict:
    """The expected (path -> shape) entries that the walk does not find on ``device``
    with that shape, with what it found there instead."""
    found = {path: (t.device.type, tuple(t.shape)) for path, t in walk(strategy)}
    return {
        path: found.get(path)
        for path, shape in expected.items()
        if found.get(path) != (device.type, shape)
    }


# --------------------------------------------------------------- CUDA's rule, on meta


# copies between devices are what moving is; the indices of an indexing op may live on
# the host (CUDA takes them from there), only its self and values (positions) must match
CROSS_DEVICE = {
    aten._to_copy,
    aten.copy_,
    aten.copy,
    aten._copy_from,
    aten._copy_from_and_resize,
    aten.lift_fresh,
    aten.lift_fresh_copy,
}
INDEXING = {
    aten.index: (0,),
    aten._unsafe_index: (0,),
    aten.index_put: (0, 2),
    aten.index_put_: (0, 2),
    aten._index_put_impl_: (0, 2),
    aten._unsafe_index_put: (0, 2),
}


class SameDevice(TorchDispatchMode):
    """Every aten op with tensors on two devices fails, as on a GPU; a 0-dim CPU tensor
    (a Python scalar as a tensor) may join any device, as there."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = func.overloadpacket
        if op not in CROSS_DEVICE:
            checked = (
                [args[i] for i in INDEXING[op] if i < len(args)]
                if op in INDEXING
                else [args, kwargs]
            )
            flat = [t for t in tree_flatten(checked)[0] if isinstance(t, torch.Tensor)]
            if len({t.device for t in flat if t.dim() or t.device.type != "cpu"}) > 1:
                raise RuntimeError(
                    f"device mismatch in {func}: "
                    + ", ".join(f"{t.device} {tuple(t.shape)}" for t in flat)
                )
        return func(*args, **kwargs)


# ------------------------------------------------------------------------ building a run


def tiny_vit() -> Backbone:
    """The random ViT-Tiny at 32 px with its first :data:`BLOCKS` blocks (docstring)."""
    backbone = load_backbone(VIT, "random", SIZE)
    backbone.model.blocks = backbone.model.blocks[:BLOCKS]
    return backbone


def stream_for(inputs: Inputs) -> Stream:
    """The tiny stream of ``inputs``: frozen features for a features method, else images
    in memory (with the cached test queries of a prompt method)."""
    data = synthetic(
        n_classes=N_CLASSES,
        train_per_class=TRAIN_PER_CLASS,
        test_per_class=TEST_PER_CLASS,
        size=SIZE,
    )
    order, g = list(range(N_CLASSES)), torch.Generator().manual_seed(0)
    if inputs is Inputs.FEATURES:
        train = torch.randn(len(data.train_y), D, generator=g)
        test = torch.randn(len(data.test_y), D, generator=g)
        return build_stream(
            train, data.train_y, test, data.test_y, order, SIZES, test_shuffle=False, seed=0
        )
    query = (
        torch.randn(len(data.test_y), D, generator=g)
        if (inputs is Inputs.IMAGES_WITH_QUERY)
        else None
    )
    tf = ToModelInput(SIZE)
    return build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        order,
        SIZES,
        test_shuffle=False,
        seed=0,
        train_transform=tf,
        eval_transform=tf,
        test_query=query,
    )


def adapted(stream: Stream, backbone: Backbone) -> AdaptedStream:
    """An adapted method's stream: after task 1, the features of the same images under
    the backbones it names (as the runner's ``features_stream``, extracted here)."""

    def features(backbones: list[Backbone]) -> Stream:
        def split(experiences) -> tuple[torch.Tensor, torch.Tensor]:
            xs, ys = [], []
            for e in experiences:
                for x, y, *_ in DataLoader(e.dataset.eval(), batch_size=64):
                    xs.append(torch.cat([b.features(x) for b in backbones], dim=1))
                    ys.append(y)
            return torch.cat(xs), torch.cat(ys)

        (train_x, train_y), (test_x, test_y) = split(stream.train), split(stream.seen_test[-1:])
        return build_stream(
            train_x,
            train_y,
            test_x,
            test_y,
            list(range(N_CLASSES)),
            SIZES,
            test_shuffle=False,
            seed=0,
        )

    return AdaptedStream(stream, backbone, features)


def signature(t: torch.Tensor) -> tuple[str, tuple[int, ...], torch.dtype]:
    return t.device.type, tuple(t.shape), t.dtype


class Probe(Bookkeeping, SupervisedPlugin):
    """Devices and shapes (never values) of what the loop computes."""

    def __init__(self) -> None:
        super().__init__()
        self.train: list[tuple] = []
        self.loss: list[tuple] = []
        self.grads: list[list[tuple]] = []
        self.eval: list[tuple] = []

    def after_forward(self, strategy, **kwargs) -> None:
        self.train.append(signature(strategy.mb_output))

    def after_backward(self, strategy, **kwargs) -> None:
        self.loss.append(signature(strategy.loss))
        self.grads.append(
            [
                (name, p.grad.device.type, p.grad.shape == p.shape)
                for name, p in strategy.model.named_parameters()
                if p.requires_grad and p.grad is not None
            ]
        )

    def after_eval_forward(self, strategy, **kwargs) -> None:
        self.eval.append(signature(strategy.mb_output))


@dataclasses.dataclass
class Run:
    strategy: object
    driven: Stream | AdaptedStream
    params: dict
    probe: Probe
    recorder: Recorder
    watch: FiniteWatch

    @property
    def images(self) -> Stream:
        return self.driven.images if isinstance(self.driven, AdaptedStream) else self.driven


def build(method: str, backbone: Backbone, device: torch.device) -> Run:
    """The strategy as the runner's ``train_and_evaluate.build()`` makes it (with the probe
    among its plugins) and the stream the runner drives it over."""
    card = load_method(method)
    for key, value in {**CHEAP, **CHEAP_FOR.get(method, {})}.items():
        if key in card.params:
            card.override(key, str(value))
    if card.params.get("n_tasks") == 0:  # as load_shared: the stream's number of tasks
        card.params["n_tasks"] = len(SIZES)
    resolve_for_backbone(card, backbone)
    cls = strategy_of(card)
    stream = stream_for(spec_of(cls).inputs)
    recorder = Recorder(stream.task_of_label, backbone, label=card.name, progress=False)
    watch = FiniteWatch(card.name, card.params, card.raw.get("defaults"))
    probe = Probe()
    strategy = cls(
        params=card.params,
        backbone=backbone,
        n_classes=N_CLASSES,
        device=device,
        plugins=[recorder, TrainFlops(), watch, probe],
        evaluator=quiet_evaluator(),
    )
    driven = adapted(stream, backbone) if spec_of(cls).inputs is Inputs.ADAPTED_FEATURES else stream
    return Run(strategy, driven, card.params, probe, recorder, watch)


PACKAGE = str(Path(cl_bench.__file__).resolve().parent)


def stop_site(error: BaseException) -> str:
    """The innermost function of the cl_bench package on the error's traceback."""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if str(Path(f.filename).resolve()).startswith(PACKAGE + os.sep)
    ]
    return frames[-1].name if frames else "?"


def drive_on_meta(run: Run, same_device: bool = True) -> tuple[list[str], BaseException | None]:
    """Drive ``run`` (built on meta) as the runner does, under :class:`SameDevice` (unless
    ``same_device`` is false), then evaluate on every class; the walk's findings after
    construction, after each task and after the evaluation, and the error that stopped
    it, if one did."""
    s = run.strategy
    s.model.to(s.device)  # what train() does first: the construction as a run sees it
    problems = off_device(s, META, "after construction")
    s.plugins = [p for p in s.plugins if p not in (run.recorder, run.watch)]  # they read values

    def after_task(i: int) -> None:
        problems.extend(off_device(s, META, f"after task {i}"))

    try:
        with SameDevice() if same_device else contextlib.nullcontext():
            drive(s, run.driven, after_task=after_task, evaluate=False)
            problems.extend(off_device(s, META, "after training"))
            s.eval(run.images.seen_test[-1])
    except (RuntimeError, NotImplementedError) as e:
        problems.extend(off_device(s, META, "where it stopped"))
        return problems, e
    problems.extend(off_device(s, META, "after the evaluation"))
    return problems, None


# ----------------------------------------------------------------------------- on meta


@pytest.fixture(scope="module")
def meta_vit() -> Backbone:
    return tiny_vit().to(META)  # as load_shared moves the run's backbone


@pytest.mark.parametrize("method", METHODS)
def test_every_tensor_follows_the_device(meta_vit, method):
    run = build(method, meta_vit, META)
    problems, stopped = drive_on_meta(run)
    assert not problems, f"{method}: tensors not on the run's device:\n" + "\n".join(problems)
    if method in STOPS_ON_META:
        site, why = STOPS_ON_META[method]
        assert stopped is not None, (
            f"{method} now runs through on meta: drop it from "
            "STOPS_ON_META (and give it EVAL_COLUMNS)"
        )
        message = str(stopped)
        assert "device mismatch" not in message and any(r in message for r in META_REFUSALS), (
            f"{method} stopped on meta for another reason than a value read: {message}"
        )
        assert stop_site(stopped) == site, (
            f"{method} now stops on meta in {stop_site(stopped)}, not in {site} ({why}): "
            f"update STOPS_ON_META. {message}"
        )
    elif stopped is not None:
        raise stopped
    assert missing(run.strategy, GROWN[method](run.params), META) == {}

    # what the loop computed, by device and shape
    tasks = 1 if method in STOPS_ON_META else len(SIZES)
    steps = TRAIN_STEPS.get(method, [(TASK, N_CLASSES)] * tasks)[:tasks]
    assert run.probe.train == [("meta", shape, torch.float32) for shape in steps]
    assert run.probe.loss == [("meta", (1,), torch.float32)] * len(steps)
    assert len(run.probe.grads) == len(steps)
    for grads in run.probe.grads:
        assert grads and all(device == "meta" and same for _, device, same in grads), grads
    if method in EVAL_COLUMNS:
        assert run.probe.eval == [
            ("meta", (N_CLASSES * TEST_PER_CLASS, EVAL_COLUMNS[method]), torch.float32)
        ]
    else:
        assert run.probe.eval == []


def test_the_tables_name_built_in_methods():
    assert set(GROWN) == set(METHODS) and set(GROWN_ON_CPU) == set(STOPS_ON_META)
    assert set(STOPS_ON_META) < set(METHODS) and set(TRAIN_STEPS) < set(METHODS)


# --------------------------------------------------------------- the checks themselves


def test_same_device_checks_what_meta_lets_through():
    a, b = torch.zeros(2, 3, device=META), torch.zeros(4, 3)
    unchecked = {
        "mm": lambda: a @ b.T,
        "linear": lambda: F.linear(a, b),
        "bmm": lambda: torch.bmm(a[None], b.T[None]),
        "addmm": lambda: torch.addmm(torch.zeros(2, 4, device=META), a, b.T),
        "einsum": lambda: torch.einsum("ij,kj->ik", a, b),
        "index_select": lambda: a.index_select(0, torch.tensor([0])),
        "add_": lambda: a.add_(b[:2]),
    }
    for name, op in unchecked.items():
        assert isinstance(op(), torch.Tensor), name  # meta alone: no error (einsum even
        # returns a CPU tensor of uninitialised memory)
        with SameDevice(), pytest.raises(RuntimeError, match="device mismatch"):
            op()
    with SameDevice():  # what a GPU allows too
        assert a[torch.tensor([1, 0])].shape == (2, 3)  # host indices
        assert a.copy_(b[:2]).device == META  # a copy between devices
        assert (a * torch.tensor(2.0)).device == META  # a 0-dim CPU tensor
        a[torch.tensor([0])] = torch.zeros(1, 3, device=META)


def test_the_walk_names_a_tensor_left_on_the_host(meta_vit):
    s = build("simplecil", meta_vit, META).strategy
    s.model.to(s.device)
    s.model.stray = torch.zeros(2)  # a plain attribute of a module
    flops = next(p for p in s.plugins if isinstance(p, TrainFlops))
    flops.kept = {"rows": [torch.ones(3, device=META), torch.ones(1)]}  # in containers
    s.note = SimpleNamespace(table=torch.zeros(1), deeper=SimpleNamespace(t=torch.zeros(1)))
    assert off_device(s, META, "planted") == [
        "planted: plugins.TrainFlops.kept['rows'][1] on cpu, shape (1,)",
        "planted: model.stray on cpu, shape (2,)",
        "planted: note.table on cpu, shape (1,)",
    ]  # one level into a plain object only


def test_a_tensor_made_on_the_host_fails_the_drive(meta_vit, monkeypatch):
    """A classifier that normalises a weight made without ``device=`` (the bug this file
    is about) in its forward: meta alone lets SimpleCIL's drive through (a matrix
    product), SameDevice stops it with the mismatch a GPU would raise."""

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        weight = torch.ones(self.weight.shape)  # on the host
        return self.sigma * F.linear(F.normalize(f, dim=-1), F.normalize(weight, dim=-1))

    monkeypatch.setattr(CosineClassifier, "forward", forward)
    assert drive_on_meta(build("simplecil", meta_vit, META), same_device=False) == ([], None)
    problems, stopped = drive_on_meta(build("simplecil", meta_vit, META))
    assert problems == [] and isinstance(stopped, RuntimeError)
    assert str(stopped).startswith("device mismatch in aten.")
    assert str(stopped).endswith(f"meta ({N_CLASSES}, {D}), cpu ({D}, {N_CLASSES})")


# ----------------------------------------------------------------------------- on the CPU


@pytest.mark.parametrize("method", sorted(STOPS_ON_META))
def test_grown_state_on_the_cpu(method):
    run = build(method, tiny_vit(), CPU)
    drive(run.strategy, run.driven)
    assert [len(row) for row in run.recorder.acc_matrix] == [1, 2]  # both tasks, evaluated
    found = walk(run.strategy)
    assert {t.device for _, t in found} == {run.strategy.device}
    assert missing(run.strategy, GROWN_ON_CPU[method](run.params), CPU) == {}
