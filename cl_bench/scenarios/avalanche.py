"""A scenario card as a standard Avalanche benchmark, for your own Avalanche code::

    from cl_bench.scenarios.avalanche import scenario   # also cl_bench.scenario
    bench = scenario("imagenet-r", seed=1993, data_root="~/data")
    for exp in bench.train_stream:
        strategy.train(exp)
        strategy.eval(bench.test_stream[: exp.current_experience + 1])

It is the object ``cl-bench run --scenario <name> --seeds <seed>`` trains on: the
same card, data, class order and task split, built by the same builder
(:func:`cl_bench.scenarios.stream.build_stream`). ``train_stream`` experience i holds
task i's training images, ``test_stream`` experience i the test images of task i's
classes, class by class; each experience carries Avalanche's
``classes_in_this_experience``, ``previous_classes``, ``classes_seen_so_far`` and
``future_classes``. ``seen_test_stream`` experience i is what a run evaluates after
task i: the test images of every class seen so far in one pass, shuffled with the
seed when the card says ``test_shuffle: true``.

Labels are cl-bench's: positions in the class order, so task i's classes are
consecutive labels; label p is the dataset's class ``bench.class_order[p]``, named
``bench.class_names[p]``. Images are float (3, size, size) in [0, 1] at the
backbone's input size through the run's train transform (train stream) and eval
transform (test streams), not normalised: cl-bench's backbones normalise inside.
"""

from __future__ import annotations

from pathlib import Path

from avalanche.benchmarks.scenarios.generic_scenario import CLScenario

from cl_bench import arguments
from cl_bench.backbones import DEFAULT_BACKBONE, backbone_kind, load_backbone
from cl_bench.cards.catalogue import load_scenario
from cl_bench.errors import refuse_long_names
from cl_bench.input_checks import check_image_size
from cl_bench.scenarios import load_data, scenario_order
from cl_bench.scenarios.order import task_split
from cl_bench.scenarios.stream import build_stream
from cl_bench.scenarios.transforms import eval_transform, train_transform


@refuse_long_names
def scenario(
    name: str,
    *,
    seed: int = 1993,
    data_root: str | Path | None = None,
    backbone: str | None = None,
    weights: str | None = None,
    image_size: int | None = None,
    download: bool = False,
) -> CLScenario:
    """The Avalanche benchmark of scenario card ``name`` with the class order of
    ``seed`` (see the module docstring). ``backbone`` and ``image_size`` set the image
    size as ``--backbone`` and ``--image-size`` do; only the architecture decides it,
    so ``weights`` (as ``--weights``) are only loaded, and checked, when given.
    ``data_root`` and ``download``: as ``--data-root`` and ``--download``. A bad name,
    seed or size raises the ``UserError`` that ``cl-bench run`` reports, and so does an
    argument of the wrong type (:mod:`cl_bench.arguments`)."""
    name = arguments.text("name", name, 'name="fmnist"')
    seed = arguments.seed(seed)
    backbone = (
        arguments.text("backbone", backbone, 'backbone="vit_base_patch16_224"', optional=True)
        or DEFAULT_BACKBONE
    )
    weights = arguments.text("weights", weights, 'weights="random"', optional=True, path=True)
    image_size = arguments.whole("image_size", image_size, "image_size=224", optional=True)
    root = arguments.folder("data_root", data_root, 'data_root="~/data"', optional=True)
    download = arguments.flag("download", download)
    check_image_size(backbone, backbone_kind(backbone), image_size)
    card = load_scenario(name)
    size = load_backbone(backbone, weights or "random", image_size).input_size
    data = load_data(card, root, download)
    order = scenario_order(card, data.n_classes, seed)
    sizes = task_split(data.n_classes, card.params["init_cls"], card.params["increment"])
    stream = build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        order,
        sizes,
        test_shuffle=card.params["test_shuffle"],
        seed=seed,
        train_transform=train_transform(data.on_disk, size),
        eval_transform=eval_transform(data.on_disk, size),
    )
    bench = stream.benchmark
    bench.class_order = order
    bench.class_names = [data.class_names[c] for c in order]
    return bench
