"""What a method declares: its :class:`MethodSpec`, the hooks of :class:`Method` and
the backbones it runs on (the whole contract: :mod:`cl_bench.contract`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from cl_bench.contract.protocol import ProtocolSetting
from cl_bench.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cl_bench.backbones.base import Backbone
    from cl_bench.contract.memory import Allocation, Workload

BACKBONE_KINDS = ("any", "vit", "cnn")


class Inputs(enum.Enum):
    """What a method's model consumes (see the module docstring)."""

    FEATURES = "features"
    IMAGES = "images"
    IMAGES_WITH_QUERY = "images+query"
    ADAPTED_FEATURES = "adapted-features"


class Schedule(enum.Enum):
    """How :func:`drive` runs a method over a stream."""

    PER_TASK = "per-task"
    JOINT = "joint"


@dataclass(frozen=True)
class MethodSpec:
    """A method's declaration; every field but ``protocol`` is required, so nothing is
    implied. ``protocol``: the card settings that decide how the method is evaluated
    (:class:`~cl_bench.contract.protocol.ProtocolSetting`, each with its meaning), in
    the order a report's label names them; none by default."""

    inputs: Inputs
    trains_backbone: bool
    schedule: Schedule
    protocol: tuple[ProtocolSetting, ...] = ()

    def __post_init__(self) -> None:
        if (
            not isinstance(self.inputs, Inputs)
            or not isinstance(self.schedule, Schedule)
            or not isinstance(self.trains_backbone, bool)
        ):
            raise TypeError(
                f"MethodSpec takes an Inputs, a bool and a Schedule, not "
                f"{self.inputs!r}, {self.trains_backbone!r}, {self.schedule!r}"
            )
        keys = (
            [s.key for s in self.protocol]
            if isinstance(self.protocol, tuple)
            and all(isinstance(s, ProtocolSetting) for s in self.protocol)
            else None
        )
        if keys is None or len(set(keys)) != len(keys):
            raise TypeError(
                f"MethodSpec's protocol is a tuple of ProtocolSetting with "
                f"distinct keys, not {self.protocol!r}"
            )

    @property
    def reads_feature_cache(self) -> bool:
        """Whether a run of the method reads (and may write) the feature cache."""
        return self.inputs is not Inputs.IMAGES


class Method:
    """Base of every strategy class (mixed in before the Avalanche template): the
    declaration ``spec`` and the two hooks, each with its documented default."""

    spec: ClassVar[MethodSpec]
    # the settings it reads as params["key"]: a card without one is refused when it loads,
    # not mid-run (a subclass of a built-in strategy needs its built-in card's settings too)
    required_settings: ClassVar[tuple[str, ...]] = ()
    # the backbones it runs on (one of BACKBONE_KINDS), and what it puts inside the
    # backbone, which the refusal of another backbone names (:func:`check_backbone`)
    backbones: ClassVar[str] = "any"
    injects: ClassVar[str] = ""

    if TYPE_CHECKING:
        # the loops of the Avalanche template it is mixed into, which drive() calls

        def train(
            self, experiences: Any, eval_streams: Sequence[Any] | None = None, **kwargs: Any
        ) -> Any: ...

        def eval(self, experiences: Any, **kwargs: Any) -> Any: ...

    @classmethod
    def resolve_params(cls, params: dict[str, Any], backbone: Backbone) -> None:
        """Replace, in ``params``, values that depend on the backbone (``auto``) by
        the value used. Default: none do."""

    @classmethod
    def check_params(cls, params: dict[str, Any], backbone: Backbone) -> None:
        """Refuse (``UserError``) settings the backbone makes invalid. Default: the
        method has none; the card's bounds and choices cover its settings."""

    @classmethod
    def memory(cls, params: dict[str, Any], work: Workload) -> list[Allocation]:
        """The method's own dominant allocations under the resolved ``params`` (lower
        bounds, so that a refusal is never wrong), each naming the key of ``params``
        that scales it. Default: none beyond what every run allocates (the engine
        counts those)."""
        return []

    @classmethod
    def repeats_after(cls, params: dict[str, Any], n_tasks: int) -> int | None:
        """For ``cl-bench account`` on a stream of ``n_tasks`` tasks: the number k of
        first tasks after which, under ``params``, every task repeats the one before it.
        Such a task adds what the one before added (modules, classifier rows, class
        statistics) for its own classes, and its training step and the inference after
        it run the same code over one more task's worth of what is kept: no branch on
        the task's index or on the number of classes seen changes what runs. Its counts
        (parameters trained, added and stored, FLOPs of a training step and of
        inference) are then polynomials of degree at most 3 in the task's index; account
        runs k + 6 tasks, fits the counts of tasks k + 1 .. k + 4, checks the fit
        exactly on the last two and extends it to the stream's end
        (:mod:`cl_bench.accounting.extend`; it runs every task where the check fails).
        Default None: account runs every task."""
        return None

    @classmethod
    def account_settings(cls, params: dict[str, Any], n_tasks: int) -> dict[str, Any]:
        """For ``cl-bench account`` on a stream of ``n_tasks`` tasks: settings under which
        a run counts what a run under ``params`` counts (the same parameters trained,
        added and stored and the same training step at every task, and the same
        inference after the last task) with tasks that repeat from fewer first tasks on.
        Where a setting switches inference from a fixed task on (CaRE's T + 1 test passes
        end after task ``iter_pred_max_task``), the setting that runs the last task's
        inference from the first task. Default: none."""
        return {}

    def routing(self) -> torch.Tensor | None:
        """The module chosen per sample of the last evaluated batch, or None for a
        method that does not route (the default)."""
        return None

    def feature_backbones(self, backbone: Backbone) -> list[Backbone]:
        """The backbones whose features, concatenated in this order, a features method
        consumes: the frozen ``backbone`` by default. An ``ADAPTED_FEATURES`` method
        names its adapted backbone here once adapted (not before the first task)."""
        return [backbone]


class Bookkeeping:
    """Marks a plugin whose state is not part of what the method stores: the recorder,
    the FLOP meter, data plumbing, test instrumentation."""


def spec_of(cls: type, card: Path | None = None) -> MethodSpec:
    """The contract ``cls`` declares; a ``UserError`` naming the class (and the card
    that names it) when it declares none."""
    if isinstance(cls, type) and issubclass(cls, Method):
        try:
            spec = cls.spec
        except AttributeError:  # Method only annotates it
            spec = None
        if isinstance(spec, MethodSpec):
            return spec
    where = f"{card}: " if card is not None else ""
    name = f"{cls.__module__}:{cls.__qualname__}" if isinstance(cls, type) else repr(cls)
    raise UserError(
        f"{where}strategy {name} declares no method contract: what it consumes, whether it "
        "trains the backbone and how it is driven. Either the class derives from "
        "cl_bench.contract.Method and declares it, e.g. spec = MethodSpec(inputs="
        "Inputs.IMAGES, trains_backbone=False, schedule=Schedule.PER_TASK) (see "
        "cl_bench/contract/), or, for a plain Avalanche strategy, its method card declares "
        "it in a `contract:` block with inputs, trains_backbone, schedule and the model "
        "factory to build it with (see cl_bench/contract/plain.py)."
    )


def check_backbone(cls: type, method: str, backbone: str, kind: str) -> None:
    """Refuse (``UserError``) running ``method`` (its strategy ``cls``) on ``backbone``
    of ``kind`` ("vit" or "cnn") when the method does not run on that kind: the one
    check of the backbones a method accepts, naming what the method puts inside it."""
    wanted = getattr(cls, "backbones", "any")
    if wanted in ("any", kind):
        return
    injects = getattr(cls, "injects", "")
    why = f" (it {injects})" if injects else ""
    example = "vit_base_patch16_224" if wanted == "vit" else "efficientnet_lite0"
    label = "ViT" if wanted == "vit" else "CNN"
    raise UserError(
        f'{method} needs a {wanted.upper()} backbone{why}, but "{backbone}" is a '
        f"{kind.upper()}. Choose a {label} with --backbone (e.g. {example}) or drop "
        f"{method} from --methods."
    )
