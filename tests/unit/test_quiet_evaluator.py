"""The runner's evaluator: no metrics, no loggers, and callbacks that return at once
(Avalanche's own would build a logging view of the experience at each of them)."""

from __future__ import annotations

from types import SimpleNamespace

from avalanche.training.plugins import EvaluationPlugin

from cl_bench.engine.runner import quiet_evaluator

CALLBACKS = (
    "before_training_iteration",
    "before_forward",
    "after_forward",
    "before_backward",
    "after_backward",
    "before_update",
    "after_update",
    "after_training_iteration",
    "before_eval_iteration",
    "after_eval_iteration",
)


class NoLoggingView:
    """An experience whose logging view must not be asked for."""

    def logging(self):
        raise AssertionError("the quiet evaluator built a logging view")


def test_callbacks_touch_neither_the_experience_nor_any_metric():
    evaluator = quiet_evaluator()
    assert isinstance(evaluator, EvaluationPlugin)
    assert evaluator.metrics == [] and evaluator.loggers == []
    experience = NoLoggingView()
    strategy = SimpleNamespace(experience=experience)
    for name in CALLBACKS:
        assert getattr(evaluator, name)(strategy) is None
    assert strategy.experience is experience
    assert evaluator.get_all_metrics() == {}
