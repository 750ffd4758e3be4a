"""cl-bench's side of CODA-Prompt's step check and paired seeds
(bench/parity/methods/coda_prompt/row.py).

Runs cl-bench's own ``CodaPrompt`` strategy (Avalanche loop, ``CodaNet``, its
optimizer and ``coda_cosine`` schedule, its loss) on fixed batches: the first
images of each class of the parity tree through the test transform (no
augmentation), in one seeded order that the loader keeps (``shuffle=False``), fp32,
one thread. It writes one file (``torch.save``) for the reference driver
(methods/coda_prompt/reference.py) to replay and to compare against:

``batches``  per task, the list of (images, labels) exactly as the strategy saw them;
``test``     test images (label-ordered) and labels;
``init``     per task, every trainable tensor before that task's first step (task 1:
             the initial state; task 2: with the new components' Gram-Schmidt draw);
``draws``    per task, the Gaussian draws of that task's Gram-Schmidt
             (``{name: [per layer (rows, width)]}``, name p / k / a);
``after``    ``{"step 1" | "task 1" | ... | "task T": {"params": {...}, "logits": (N, seen)}}``;
``losses``   per task, the loss of every step; ``ortho``: its orthogonality term.

    python -m bench.parity.methods.coda_prompt.ours OUT.pt WEIGHTS TREE SIZE SEED JSON

JSON holds the card settings to override (``--set coda-prompt.KEY=VALUE``) and
``train_per_class``, ``test_per_class``, ``increment`` (classes per task), ``tasks``
(how many to train).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from avalanche.core import SupervisedPlugin

from cl_bench.backbones import load_backbone
from cl_bench.cards.catalogue import load_method
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.scenarios.stream import build_stream
from cl_bench.scenarios.transforms import eval_transform
from cl_bench.strategies import coda_prompt

NAMES = ("p", "k", "a")  # the order in which CodaNet.begin_task draws


def trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every trainable tensor, by the reference's names: p/k/a (layers, pool, ...),
    head.weight, head.bias."""
    return {name: t.detach().clone() for name, t in model.named_parameters() if t.requires_grad}


def load_split(
    tree: Path, split: str, per_class: int, size: int
) -> tuple[list[torch.Tensor], list[int]]:
    """The first ``per_class`` images of every class folder, test-transformed."""
    tf = eval_transform(True, size)
    images, labels = [], []
    for c, folder in enumerate(sorted((tree / split).iterdir())):
        for path in sorted(folder.iterdir())[:per_class]:
            images.append(tf(str(path)))
            labels.append(c)
    return images, labels


class Capture(SupervisedPlugin):
    """Records, inside cl-bench's own loop, what the step check compares."""

    def __init__(self, test_x: torch.Tensor, test_y: torch.Tensor) -> None:
        super().__init__()
        self.test_x, self.test_y = test_x, test_y
        self.task, self.steps = -1, 0
        self.out = {"batches": [], "init": [], "losses": [], "ortho": [], "after": {}}

    def logits(self, model: torch.nn.Module) -> torch.Tensor:
        seen = int((~model.unseen).sum())
        keep = self.test_y < seen
        was = model.training
        model.eval()
        with torch.no_grad():
            out = model(self.test_x[keep])[:, :seen]
        model.train(was)
        return out

    def before_training_exp(self, strategy, **kwargs) -> None:
        self.task += 1
        self.steps = 0
        self.out["batches"].append([])
        self.out["losses"].append([])
        self.out["ortho"].append([])

    def before_training_iteration(self, strategy, **kwargs) -> None:
        if self.steps == 0:
            self.out["init"].append(trainable(strategy.model))
        if strategy.clock.train_exp_epochs == 0:
            self.out["batches"][-1].append((strategy.mb_x.clone(), strategy.mb_y.clone()))

    def after_training_iteration(self, strategy, **kwargs) -> None:
        self.steps += 1
        self.out["losses"][-1].append(strategy.loss.item())
        self.out["ortho"][-1].append(float(strategy.model.regularizer))
        if self.task == 0 and self.steps == 1:
            self.out["after"]["step 1"] = {
                "params": trainable(strategy.model),
                "logits": self.logits(strategy.model),
            }

    def after_training_exp(self, strategy, **kwargs) -> None:
        self.out["after"][f"task {self.task + 1}"] = {
            "params": trainable(strategy.model),
            "logits": self.logits(strategy.model),
        }


def recording_draws(store: list) -> None:
    """Wrap both Gram-Schmidt rules so that the Gaussian draw of each call is kept."""

    def wrap(original):
        def wrapped(old: torch.Tensor, count: int) -> torch.Tensor:
            state = torch.random.get_rng_state()
            store.append(torch.randn(count, old.shape[1], dtype=old.dtype))
            torch.random.set_rng_state(state)  # the same draw is made again inside
            return original(old, count)

        return wrapped

    coda_prompt.orthonormal_rows = wrap(coda_prompt.orthonormal_rows)
    coda_prompt.official_rows = wrap(coda_prompt.official_rows)


def main(out: Path, weights: str, tree: Path, size: int, seed: int, setting: dict) -> None:
    torch.set_num_threads(1)
    card = load_method("coda-prompt")
    params = {**card.params, **{k: v for k, v in setting.items() if k in card.params}}
    backbone = load_backbone("vit_tiny_patch16_224", weights, size)
    backbone.precision = "fp32"
    train, ytr = load_split(tree, "train", setting["train_per_class"], size)
    test, yte = load_split(tree, "test", setting["test_per_class"], size)
    n_classes = len(set(ytr))
    order = list(range(n_classes))
    # one seeded order of the training images, kept by the loader (shuffle=False)
    perm = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))
    train_x, train_y = torch.stack(train)[perm], torch.tensor(ytr)[perm]
    test_x, test_y = torch.stack(test), torch.tensor(yte)
    per_task = setting["increment"]
    stream = build_stream(
        train_x,
        train_y,
        test_x,
        test_y,
        order,
        [per_task] * (n_classes // per_task),
        test_shuffle=False,
        seed=seed,
    )
    torch.manual_seed(seed)
    capture = Capture(test_x, test_y)
    draws: list[torch.Tensor] = []
    recording_draws(draws)
    strategy = coda_prompt.CodaPrompt(
        params=params,
        backbone=backbone,
        n_classes=n_classes,
        device=torch.device("cpu"),
        plugins=[capture],
        evaluator=quiet_evaluator(),
    )
    for task in range(setting["tasks"]):
        strategy.train(stream.train[task], shuffle=False, num_workers=0)
    # begin_task draws per task: for each of p, k, a, one draw per layer
    n = len(params["layers"])
    per_call = [
        {name: draws[(3 * task + j) * n : (3 * task + j + 1) * n] for j, name in enumerate(NAMES)}
        for task in range(setting["tasks"])
    ]
    result = {**capture.out, "draws": per_call, "test": (test_x, test_y), "params": params}
    torch.save(result, out)


if __name__ == "__main__":
    main(
        Path(sys.argv[1]),
        sys.argv[2],
        Path(sys.argv[3]),
        int(sys.argv[4]),
        int(sys.argv[5]),
        json.loads(sys.argv[6]),
    )
