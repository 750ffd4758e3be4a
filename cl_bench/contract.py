"""The method contract: what a strategy class declares so that cl-bench can run it,
and :func:`drive`, the one loop that runs any strategy over a stream.

The runner, ``cl-bench account``, the benchmarks and the tests never guess what a
method is from its attributes; they read its declaration. To bring your own method,
write an Avalanche ``SupervisedTemplate`` subclass that also derives from
:class:`Method`, declare its :class:`MethodSpec`, and name the class in a method
card (``strategy: package.module:Class``)::

    class MyMethod(Method, SupervisedTemplate):
        spec = MethodSpec(inputs=Inputs.IMAGES, trains_backbone=False,
                          schedule=Schedule.PER_TASK)

        def __init__(self, *, params, backbone, n_classes, device, plugins, evaluator):
            ...  # build the model; pass plugins and evaluator on to the template

What a method declares:

* **what it consumes** (``inputs``, :class:`Inputs`): ``FEATURES``, the frozen final
  [CLS] feature of every image, extracted once and cached (the method never runs the
  backbone; training and evaluation run on one thread, and the backbone's one pass
  per image is added to its inference FLOPs); ``IMAGES``, the images in [0, 1] at the
  backbone's input size; ``IMAGES_WITH_QUERY``, images plus their frozen feature from
  the cache as a third mini-batch element, where the transform allows it (test
  images; training images held in memory); ``ADAPTED_FEATURES``, first-session
  adaptation (APER, RanPAC): the first task's experience holds its training images, on
  which the method adapts a private version of the backbone (its weights or adapters
  live in the method's model, so they are stored and checkpointed); every later
  training experience and every test experience then holds features, as for
  ``FEATURES``, of the backbones the method names once adapted
  (:meth:`Method.feature_backbones`: the frozen one, the adapted one, or both,
  concatenated in that order), each extracted once and cached under its own weights
  digest. The method fits its classifier on the first task from those backbones'
  features of that task's images, which it computes itself (one pass per image, as
  the store would); it never runs a backbone after the first task. :func:`drive`
  takes an :class:`AdaptedStream` for it;
* **whether it trains the backbone** (``trains_backbone``): such a method trains a
  private copy of the shared backbone, which is then kept in fp32 for every method of
  the run (no bf16 weight storage);
* **how it is driven** (``schedule``, :class:`Schedule`): ``PER_TASK`` trains task i
  then evaluates on the test images of the classes seen so far, for every task, and
  can resume after any finished task; ``JOINT`` trains once on the list of every
  task's experience, then runs the same evaluations (an upper bound, never resumed
  mid-stream);
* **what it validates before any run** (:meth:`Method.check_params`): settings that
  only the backbone can check (e.g. block indices); the card's bounds and choices are
  checked earlier. The runner calls it for every method of a command before the first
  run starts, so a bad setting writes nothing;
* **what it fills in from the backbone** (:meth:`Method.resolve_params`): a setting
  whose value depends on the backbone (``adapt: auto``) is replaced by the value used
  before the run's config is hashed, so the result records what ran; the card's
  ``defaults_when:`` values for the resolved value follow (:mod:`cl_bench.cards.resolve`,
  the one place run, dry run and account settle a card);
* **what it allocates that scales with its settings** (:meth:`Method.memory`): its
  dominant allocations (a Gram matrix, one adapter set per task, prototypes, a
  prompt pool), each with the setting that scales it, from the settings and the
  run's :class:`~cl_bench.engine.memory.Workload`; with what every run allocates, the
  estimate refuses a command whose runs cannot fit in memory before anything runs
  (:mod:`cl_bench.engine.memory`);
* **which backbone passes make its features** (:meth:`Method.feature_backbones`): the
  frozen backbone for a ``FEATURES`` method; the accounting counts one pass of each
  per test image;
* **which settings it reads** (``required_settings``): a card that lacks one is
  refused when it loads (:mod:`cl_bench.cards.needs`), instead of a ``KeyError``
  mid-run; a class derived from a built-in strategy needs that card's settings too;
* **how it reports routing** (:meth:`Method.routing`): a method that picks a module
  or prompt per test image returns the choice per sample of the last evaluated batch,
  and the recorder scores it against the image's task (``routing_acc``);
* **what it stores**: everything reachable from ``strategy.model`` (parameters and
  buffers) beyond the pretrained backbone: a model of the backbone's type inside it,
  the shared one or a fine-tuned copy that replaces it (Finetune, EWC, Joint), is the
  backbone and not added; weights kept beside it (APER's adapted copy) are; and every tensor
  held by the strategy's plugins, except plugins that derive from
  :class:`Bookkeeping` (measurement and data plumbing, such as the recorder). A
  plugin that keeps the method's state (EWC's importances) is an ordinary plugin.

A ``PER_TASK`` strategy that also derives from :class:`cl_bench.engine.state.Resumable`
(all shipped ones do) is checkpointed after every task, so a killed run resumes at
its next task with the numbers of an uninterrupted run; one that does not starts
over when killed.

A plain Avalanche strategy that knows nothing about cl-bench declares the same in its
card instead (a ``contract:`` block, :mod:`cl_bench.strategies.plain`). A strategy
class that declares nothing, in neither place, is refused when its card is loaded,
with one message that says both ways (:func:`spec_of`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import torch

from cl_bench.errors import UserError

if TYPE_CHECKING:
    from cl_bench.backbones.base import Backbone
    from cl_bench.engine.memory import Allocation, Workload
    from cl_bench.scenarios.stream import Stream


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
    """A method's declaration; every field is required, so nothing is implied."""

    inputs: Inputs
    trains_backbone: bool
    schedule: Schedule

    def __post_init__(self) -> None:
        if not isinstance(self.inputs, Inputs) or not isinstance(self.schedule, Schedule) \
                or not isinstance(self.trains_backbone, bool):
            raise TypeError(f"MethodSpec takes an Inputs, a bool and a Schedule, not "
                            f"{self.inputs!r}, {self.trains_backbone!r}, {self.schedule!r}")

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

    @classmethod
    def resolve_params(cls, params: dict, backbone: Backbone) -> None:
        """Replace, in ``params``, values that depend on the backbone (``auto``) by
        the value used. Default: none do."""

    @classmethod
    def check_params(cls, params: dict, backbone: Backbone) -> None:
        """Refuse (``UserError``) settings the backbone makes invalid. Default: the
        method has none; the card's bounds and choices cover its settings."""

    @classmethod
    def memory(cls, params: dict, work: Workload) -> list[Allocation]:
        """The method's own dominant allocations under the resolved ``params`` (lower
        bounds, so that a refusal is never wrong), each naming the key of ``params``
        that scales it. Default: none beyond what every run allocates (the engine
        counts those)."""
        return []

    def routing(self) -> torch.Tensor | None:
        """The module chosen per sample of the last evaluated batch, or None for a
        method that does not route (the default)."""
        return None

    def feature_backbones(self, backbone: Backbone) -> list[Backbone]:
        """The backbones whose features, concatenated in this order, a features method
        consumes: the frozen ``backbone`` by default. An ``ADAPTED_FEATURES`` method
        names its adapted backbone here once adapted (not before the first task)."""
        return [backbone]


@dataclass(frozen=True)
class AdaptedStream:
    """The stream of an ``ADAPTED_FEATURES`` method: ``images`` (its first task's
    training images are what the method adapts on), the run's frozen ``backbone``,
    and ``features``, which builds the stream of the given backbones' concatenated
    features (same order, split and test order as ``images``)."""

    images: Stream
    backbone: Backbone
    features: Callable[[list[Backbone]], Stream]


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
        "cl_bench/contract.py), or, for a plain Avalanche strategy, its method card declares "
        "it in a `contract:` block with inputs, trains_backbone, schedule and the model "
        "factory to build it with (see cl_bench/strategies/plain.py).")


def drive(strategy: Method, stream: Stream | AdaptedStream, *, start: int = 0,
          after_task: Callable[[int], None] | None = None, evaluate: bool = True,
          loader_args: dict | None = None) -> None:
    """Run ``strategy`` over ``stream`` as its ``spec.schedule`` says.

    ``PER_TASK``: for each task i from ``start`` (the tasks a checkpoint already
    holds are skipped): train on ``stream.train[i]``, evaluate on
    ``stream.seen_test[i]``, then ``after_task(i + 1)`` (where a run saves its
    checkpoint). ``JOINT``: one training on every task's experience, then every
    evaluation; ``start`` must be 0 and ``after_task`` is not called. An
    :class:`AdaptedStream` (``ADAPTED_FEATURES``, per task): task 1 trains on its
    images, everything else runs on the features of the backbones the strategy names
    after task 1 (or, resumed, after its adapted weights were restored).
    ``evaluate=False`` trains only (``cl-bench account``); ``loader_args`` go to
    every ``train`` and ``eval`` call (data loader workers).
    """
    loader_args = loader_args or {}
    if isinstance(stream, AdaptedStream):
        _drive_adapted(strategy, stream, start, after_task, evaluate, loader_args)
        return
    if spec_of(type(strategy)).schedule is Schedule.JOINT:
        if start:
            raise ValueError(f"a joint method is trained once; it cannot start at task {start}")
        strategy.train(stream.train, eval_streams=[], **loader_args)
        for seen in stream.seen_test if evaluate else ():
            strategy.eval(seen, **loader_args)
        return
    for i in range(start, len(stream.train)):
        strategy.train(stream.train[i], eval_streams=[], **loader_args)
        if evaluate:
            strategy.eval(stream.seen_test[i], **loader_args)
        if after_task is not None:
            after_task(i + 1)


def _drive_adapted(strategy: Method, stream: AdaptedStream, start: int,
                   after_task: Callable[[int], None] | None, evaluate: bool,
                   loader_args: dict) -> None:
    """:func:`drive` for an ``ADAPTED_FEATURES`` strategy."""
    def adapted() -> Stream:
        return stream.features(strategy.feature_backbones(stream.backbone))
    features = None if start == 0 else adapted()
    for i in range(start, len(stream.images.train)):
        if features is None:
            strategy.train(stream.images.train[0], eval_streams=[], **loader_args)
            features = adapted()
        else:
            strategy.train(features.train[i], eval_streams=[])
        if evaluate:  # feature tensors in memory: no loader workers
            strategy.eval(features.seen_test[i])
        if after_task is not None:
            after_task(i + 1)
