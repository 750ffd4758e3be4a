"""Strategies on a random-weight ViT or a stand-in backbone, driven over
:func:`~tests.helpers.streams.small_stream`, and the smallest per-task strategy."""

from __future__ import annotations

import io

import timm
import torch
from torch import nn

from cl_bench.backbones.base import Backbone, seeded_init
from cl_bench.cards.catalogue import load_method
from cl_bench.cards.strategy import import_object
from cl_bench.contract import Inputs, MethodSpec, Schedule, drive
from cl_bench.engine.checkpoint import rng_state, set_rng_state
from cl_bench.engine.environment import seed_everything
from cl_bench.engine.recording import Recorder
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.strategies.blocks.per_task import AutocastForward, PerTaskTemplate
from cl_bench.strategies.ranpac import RanPAC
from tests.helpers.streams import small_stream

CPU = torch.device("cpu")


def vit_backbone(name: str, dim: int, size: int = 32) -> Backbone:
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=0, img_size=size)
    return Backbone(
        name=name,
        model=model,
        dim=dim,
        input_size=size,
        kind="vit",
        weights="random",
        weights_digest="random",
    )


def strategy(method: str, backbone: Backbone, n_classes: int, plugins=(), **overrides):
    card = load_method(method)
    params = card.params | overrides
    return import_object(card.raw["strategy"])(
        params=params,
        backbone=backbone,
        n_classes=n_classes,
        device=CPU,
        plugins=list(plugins),
        evaluator=quiet_evaluator(),
    )


def run_stream(method: str, backbone, start=None, **overrides):
    """Train ``method`` (1 epoch, batch 8) over :func:`small_stream`, from scratch or from
    ``start`` = (task, saved checkpoint); returns the strategy, its recorder and the
    serialised checkpoint after every task."""
    stream = small_stream()
    seed_everything(1993)
    recorder = Recorder(stream.task_of_label, progress=False)
    s = strategy(method, backbone, 4, [recorder], epochs=1, batch_size=8, **overrides)
    if start is not None:
        s.restore_state(start[1]["strategy"])
        set_rng_state(start[1]["rng"])
    saved = {}

    def after(i: int) -> None:  # serialised with the RNG states, as a run's checkpoint is
        buf = io.BytesIO()
        torch.save({"strategy": s.checkpoint_state(), "rng": rng_state()}, buf)
        saved[i] = buf.getvalue()

    drive(s, stream, start=0 if start is None else start[0], after_task=after)
    return s, recorder, saved


class TinyPerTask(AutocastForward, PerTaskTemplate):
    """The smallest strategy on the shared training path (autocast forward, loss scaling
    in fp16, the per-task optimizer): a linear layer over the 3 x 32 x 32 pixels of
    :func:`small_stream`'s 4 classes, built under a fixed seed; ``settings`` override
    batch 4, 2 epochs, SGD at lr 0.01 with momentum 0.9."""

    spec = MethodSpec(inputs=Inputs.IMAGES, trains_backbone=False, schedule=Schedule.PER_TASK)

    def __init__(self, *, precision: str, plugins=(), settings: dict | None = None) -> None:
        self.precision = precision
        with seeded_init():
            model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4))
        params = {
            "batch_size": 4,
            "eval_batch_size": 8,
            "epochs": 2,
            "optimizer": "sgd",
            "lr": 0.01,
            "momentum": 0.9,
        } | (settings or {})
        super().__init__(
            params=params,
            model=model,
            device=CPU,
            plugins=list(plugins),
            evaluator=quiet_evaluator(),
        )


def run_tiny(precision: str, plugins=(), **settings) -> TinyPerTask:
    """:class:`TinyPerTask` driven over :func:`small_stream` under a fixed seed."""
    stream = small_stream()
    seed_everything(1993)
    s = TinyPerTask(precision=precision, plugins=plugins, settings=settings)
    drive(s, stream)
    return s


def toy_ranpac(m: int, dim: int = 6) -> RanPAC:
    """RanPAC without adaptation on a stand-in backbone (``fit`` reads features only)."""
    backbone = Backbone("toy", nn.Identity(), dim, 4, "vit", "random", "toy")
    params = {
        "adapt": "none",
        "M": m,
        "ffn": 4,
        "epochs": 1,
        "batch_size": 4,
        "eval_batch_size": 4,
        "optimizer": "sgd",
        "lr": 0.01,
        "momentum": 0.9,
        "weight_decay": 0.0,
        "scheduler": "cosine",
        "eta_min": 0.0,
    }
    torch.manual_seed(0)
    return RanPAC(
        params=params,
        backbone=backbone,
        n_classes=6,
        device=torch.device("cpu"),
        plugins=[],
        evaluator=quiet_evaluator(),
    )
