"""cl-bench's side of TOSCA's step check (bench/parity/methods/tosca/row.py): cl-bench's own
``Tosca`` strategy on cl-bench's fp16-stored frozen features of the parity tree, built
as the runner builds it (cl_bench/engine/runner.py ``run_one``) with the card under
the ``paper`` protocol (batch-mean entropy selection, class-ordered test batches of
``eval_batch_size``), the features of the test transform (``augment_views`` 0), the
given batches, and records of what the reference driver records
(bench/parity/methods/tosca/reference.py), for the first two tasks: the step check, and with
a seed the paired end-to-end runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from avalanche.core import SupervisedPlugin
from torch.utils.data import DataLoader

from bench.parity.methods.tosca.reference import FixedBatches
from cl_bench.backbones import load_backbone
from cl_bench.cards.catalogue import load_method
from cl_bench.cards.protocol import apply_protocol
from cl_bench.cards.resolve import resolve_for_backbone
from cl_bench.engine.environment import make_deterministic, seed_everything
from cl_bench.engine.features import FeatureStore
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.scenarios.folders import imagefolder
from cl_bench.scenarios.stream import build_stream, remap_labels
from cl_bench.strategies.tosca import Tosca


def trainable(model) -> dict[str, torch.Tensor]:
    """Every LuCA module and the classifier, in cl-bench's names."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class StepRecords(SupervisedPlugin):
    """Initial tensors per task, the state and test logits after the first step and
    after each task, the loss of every step."""

    def __init__(self, first_test) -> None:
        super().__init__()
        self.first_test = first_test
        self.init: list[dict] = []
        self.out: dict = {"losses": []}
        self.logits: list[torch.Tensor] = []
        self.labels: list[torch.Tensor] = []

    def before_training_exp(self, strategy, **kwargs) -> None:
        model = strategy.model
        init = {"luca": {k: v.detach().clone() for k, v in model.luca[-1].state_dict().items()}}
        if not self.init:
            init["classifier.weight"] = model.classifier.weight.detach().clone()
        self.init.append(init)
        self.out["losses"].append([])

    def after_training_iteration(self, strategy, **kwargs) -> None:
        self.out["losses"][-1].append(strategy.loss.item())
        if "step 1" in self.out:
            return
        model = strategy.model
        model.eval()
        with torch.no_grad():
            logits = torch.cat([model(x) for x, *_ in DataLoader(self.first_test, batch_size=48)])
        model.train()
        self.out["step 1"] = {
            "params": trainable(model),
            "loss": [strategy.loss.item()],
            "logits": logits,
        }

    def before_eval(self, strategy, **kwargs) -> None:
        self.logits.clear()
        self.labels.clear()

    def after_eval_iteration(self, strategy, **kwargs) -> None:
        self.logits.append(strategy.mb_output.detach().clone())
        self.labels.append(strategy.mb_y.detach().clone())

    def after_eval(self, strategy, **kwargs) -> None:
        t = len(self.out["losses"])
        self.out[f"task {t}"] = {
            "params": trainable(strategy.model),
            "loss": self.out["losses"][t - 1],
            "logits": torch.cat(self.logits),
            "labels": torch.cat(self.labels),
        }


def run(
    tree: Path,
    weights: Path,
    size: int,
    order: list[int],
    sizes: list[int],
    settings: dict,
    orders: list[list[list[str]]],
    seed: int = 0,
) -> tuple[dict, list[dict]]:
    """(records, initial tensors per task) of cl-bench's TOSCA on the first two tasks;
    ``orders[task][epoch]``: the batches' images, as paths relative to ``tree``;
    ``seed`` seeds the initial tensors as a run's seed does (``run_one``). Features go
    through the feature cache (``$CL_BENCH_CACHE``) as in a run."""
    make_deterministic(1)
    data = imagefolder(tree)
    backbone = load_backbone("vit_tiny_patch16_224", str(weights), size)
    card = load_method("tosca")
    apply_protocol("paper", [card])
    for key, value in {**settings, "augment_views": 0}.items():
        card.override(key, str(value))
    card.check()
    resolve_for_backbone(card, backbone)
    store = FeatureStore(
        torch.device("cpu"), precision="fp32", progress=False, use_disk=True, batch_size=32
    )
    stream = build_stream(
        store.get(backbone, data, "train"),
        data.train_y,
        store.get(backbone, data, "test"),
        data.test_y,
        order,
        sizes,
        test_shuffle=False,
        seed=0,
    )
    seed_everything(seed)
    records = StepRecords(stream.seen_test[0].dataset)
    strategy = Tosca(
        params=card.params,
        backbone=backbone,
        n_classes=data.n_classes,
        device=torch.device("cpu"),
        plugins=[records],
        evaluator=quiet_evaluator(),
    )
    task_of = stream.task_of_label[remap_labels(data.train_y, order)]
    rel = [os.path.relpath(p, tree) for p in data.train_x.paths]

    def fixed_loader(**kwargs) -> None:
        t = strategy.clock.train_exp_counter
        index = {rel[i]: j for j, i in enumerate(torch.nonzero(task_of == t).flatten().tolist())}
        ds = strategy.adapted_dataset
        strategy.dataloader = DataLoader(
            ds,
            collate_fn=ds.collate_fn,
            batch_sampler=FixedBatches(
                [[index[p] for p in epoch] for epoch in orders[t]], card.params["batch_size"]
            ),
        )

    strategy.make_train_dataloader = fixed_loader
    for t in range(2):
        strategy.train(stream.train[t], eval_streams=[])
        strategy.eval(stream.seen_test[t])
    return records.out, records.init
