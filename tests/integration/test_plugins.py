"""Avalanche plugins of the caller's own (``cl_bench.run(..., plugins=[...])``): they
join every run's strategy and receive its per-task callbacks (the experience trained,
the seen-class test set evaluated after it), run after run; a finished run read back
calls nothing, and the result's identity is that of a run without plugins."""

from __future__ import annotations

import pytest
from avalanche.core import SupervisedPlugin

import cl_bench
from cl_bench.errors import UserError

RUN = dict(scenario="synthetic", precision="fp32", progress=False, echo=None)
TRAIN_PER_CLASS, TEST_PER_CLASS, PER_TASK = 24, 8, 2  # benchmarks/synthetic.yaml


class Seen(SupervisedPlugin):
    """What the callbacks saw: (event, experience id, samples in its dataset)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, int, int]] = []

    def before_training(self, strategy, **kwargs):
        self.events.append(("start", -1, 0))

    def after_training_exp(self, strategy, **kwargs):
        exp = strategy.experience
        self.events.append(("train", exp.current_experience, len(exp.dataset)))

    def after_eval_exp(self, strategy, **kwargs):
        exp = strategy.experience
        self.events.append(("eval", exp.current_experience, len(exp.dataset)))


def expected_run(tasks: int) -> list[tuple[str, int, int]]:
    """One run's events: task i trains on its 2 classes' training images, then the
    test images of the 2 (i + 1) classes seen so far are evaluated."""
    events = []
    for i in range(tasks):
        events += [("start", -1, 0), ("train", i, PER_TASK * TRAIN_PER_CLASS)]
        events.append(("eval", i, PER_TASK * (i + 1) * TEST_PER_CLASS))
    return events


def test_a_plugin_receives_every_task_of_every_run(tmp_path):
    seen = Seen()
    done = cl_bench.run(["simplecil"], seeds=[1993, 1994], out=tmp_path, plugins=[seen], **RUN)
    tasks = len(done[0].tasks)
    assert tasks == 5
    assert seen.events == expected_run(tasks) * 2

    again = Seen()  # finished runs are read back: no callback
    reread = cl_bench.run(["simplecil"], seeds=[1993, 1994], out=tmp_path, plugins=again, **RUN)
    assert again.events == [] and [r.path for r in reread] == [r.path for r in done]

    [plain] = cl_bench.run(["simplecil"], seeds=[1993], out=tmp_path / "plain", **RUN)
    assert plain.path.name == done[0].path.name and plain.acc_matrix == done[0].acc_matrix


class NotAPlugin:
    def after_training_exp(self, strategy, **kwargs):
        pass


@pytest.mark.parametrize(
    ("plugins", "needle"),
    [
        ("seen", "plugins='seen' (str): plugins must be an Avalanche plugin or a list of them"),
        (5, "plugins=5 (int): plugins must be an Avalanche plugin or a list of them"),
        ([Seen], "plugins holds the class Seen, not a plugin: give an instance, e.g. "),
        ([NotAPlugin()], "(NotAPlugin), not an Avalanche plugin: each must be an instance of "),
    ],
)
def test_bad_plugins_are_refused_before_anything_runs(tmp_path, plugins, needle):
    with pytest.raises(UserError) as e:
        cl_bench.run(["simplecil"], out=tmp_path / "out", plugins=plugins, **RUN)
    assert needle in e.value.paragraph()
    assert not (tmp_path / "out").exists()


def test_bad_loggers_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(UserError) as e:
        cl_bench.run(["simplecil"], out=tmp_path / "out", loggers=[print], **RUN)
    assert "loggers holds <built-in function print>, not a logger: each must be an object " in (
        e.value.paragraph()
    )
    assert not (tmp_path / "out").exists()
