"""The one loop that runs any strategy over a stream (:func:`drive`), as its
:class:`~cl_bench.contract.spec.Schedule` says."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cl_bench.contract.spec import Method, Schedule, spec_of

if TYPE_CHECKING:
    from cl_bench.backbones.base import Backbone


class Stream(Protocol):
    """What :func:`drive` reads of a stream (:class:`cl_bench.scenarios.stream.Stream`
    builds one): ``train[i]``, task i's training experience, and ``seen_test[i]``, the
    test images of every class seen up to task i. Read-only members, so that a stream
    holding lists (or tuples) of experiences is one."""

    @property
    def train(self) -> Sequence[Any]: ...

    @property
    def seen_test(self) -> Sequence[Any]: ...


@dataclass(frozen=True)
class AdaptedStream:
    """The stream of an ``ADAPTED_FEATURES`` method: ``images`` (its first task's
    training images are what the method adapts on), the run's frozen ``backbone``,
    and ``features``, which builds the stream of the given backbones' concatenated
    features (same order, split and test order as ``images``)."""

    images: Stream
    backbone: Backbone
    features: Callable[[list[Backbone]], Stream]


def drive(
    strategy: Method,
    stream: Stream | AdaptedStream,
    *,
    start: int = 0,
    after_task: Callable[[int], None] | None = None,
    evaluate: bool = True,
    loader_args: dict[str, Any] | None = None,
    eval_args: dict[str, Any] | None = None,
) -> None:
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
    every ``train`` call and ``eval_args`` (by default ``loader_args``) to every
    ``eval`` call (data loader workers and pinning: :mod:`cl_bench.contract.loading`).
    """
    loader_args = loader_args or {}
    eval_args = loader_args if eval_args is None else eval_args
    if isinstance(stream, AdaptedStream):
        _drive_adapted(strategy, stream, start, after_task, evaluate, loader_args)
        return
    if spec_of(type(strategy)).schedule is Schedule.JOINT:
        if start:
            raise ValueError(f"a joint method is trained once; it cannot start at task {start}")
        strategy.train(stream.train, eval_streams=[], **loader_args)
        for seen in stream.seen_test if evaluate else ():
            strategy.eval(seen, **eval_args)
        return
    for i in range(start, len(stream.train)):
        strategy.train(stream.train[i], eval_streams=[], **loader_args)
        if evaluate:
            strategy.eval(stream.seen_test[i], **eval_args)
        if after_task is not None:
            after_task(i + 1)


def _drive_adapted(
    strategy: Method,
    stream: AdaptedStream,
    start: int,
    after_task: Callable[[int], None] | None,
    evaluate: bool,
    loader_args: dict[str, Any],
) -> None:
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
