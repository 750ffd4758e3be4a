"""The EWC reference run of bench/parity.md: Avalanche 0.6.0's own `EWC` strategy
on the parity tree, with nothing of cl-bench imported (it runs in
bench/.venv-avalanche: timm 0.6.13, Avalanche 0.6.0).

Same inputs as `run_ours.sh ewc`: the tree of make_tree.py, the ViT weights of
export_weights.py, PILOT's class order (numpy's permutation under the seed),
tasks of 2 classes, the same image transforms (train RandomResizedCrop(size,
scale (0.05, 1)) + flip, test Resize(size * 8 / 7, bicubic) + CenterCrop(size),
no mean/std), SGD with momentum, lambda, online mode and decay as given. The
head is Avalanche's `IncrementalClassifier` (its masking keeps the softmax over
the classes seen so far, as cl-bench's masked head does).

After every experience: top-1 over the test images of all seen classes, in
percent. Writes {seed: curve} as JSON.

    PY=bench/.venv-avalanche/bin/python EWC=bench/parity/methods/ewc
    $PY $EWC/reference_first_round.py TREE WEIGHTS OUT.json --seeds 1993 --size 64 ...
"""

from __future__ import annotations

import argparse
import json
import random

import numpy as np
import timm
import torch
from avalanche.benchmarks.scenarios.deprecated.generators import nc_benchmark
from avalanche.models import IncrementalClassifier
from avalanche.training import EWC
from avalanche.training.plugins.evaluation import EvaluationPlugin
from torch import nn
from torchvision import transforms as T
from torchvision.datasets import ImageFolder


class Net(nn.Module):
    """timm ViT (final-norm [CLS]) + Avalanche's growing, masked head."""

    def __init__(self, weights: str, size: int) -> None:
        super().__init__()
        self.vit = timm.create_model(
            "vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=size
        )
        self.vit.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
        self.head = IncrementalClassifier(self.vit.num_features, initial_out_features=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.vit(x))


def accuracy_seen(model: nn.Module, test_sets: list, batch: int) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for ds in test_sets:
            for x, y, *_ in torch.utils.data.DataLoader(ds, batch_size=batch):
                correct += int((model(x).argmax(1) == y).sum())
                total += len(y)
    return 100.0 * correct / total


def run(seed: int, a: argparse.Namespace) -> list[float]:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    train_tf = T.Compose(
        [
            T.RandomResizedCrop(a.size, scale=(0.05, 1.0), ratio=(3 / 4, 4 / 3)),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
        ]
    )
    test_tf = T.Compose(
        [
            T.Resize(round(a.size * 8 / 7), interpolation=T.InterpolationMode.BICUBIC),
            T.CenterCrop(a.size),
            T.ToTensor(),
        ]
    )
    train, test = ImageFolder(f"{a.tree}/train"), ImageFolder(f"{a.tree}/test")
    order = np.random.RandomState(seed).permutation(len(train.classes)).tolist()
    bench = nc_benchmark(
        train,
        test,
        n_experiences=len(order) // 2,
        task_labels=False,
        fixed_class_order=order,
        train_transform=train_tf,
        eval_transform=test_tf,
    )
    model = Net(a.weights, a.size)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=a.lr, momentum=0.9, weight_decay=a.weight_decay
    )
    strategy = EWC(
        model,
        optimizer,
        nn.CrossEntropyLoss(),
        ewc_lambda=a.ewc_lambda,
        mode="online",
        decay_factor=a.decay,
        train_mb_size=a.batch,
        train_epochs=a.epochs,
        eval_mb_size=a.eval_batch,
        device="cpu",
        evaluator=EvaluationPlugin(loggers=[]),
    )
    curve = []
    for i, exp in enumerate(bench.train_stream[: a.tasks or None]):
        strategy.train(exp, num_workers=0)
        seen = [e.dataset.eval() for e in bench.test_stream[: i + 1]]
        curve.append(accuracy_seen(strategy.model, seen, a.eval_batch))
        print(
            f"seed {seed} task {i} classes {exp.classes_in_this_experience}: {curve[-1]:.2f}",
            flush=True,
        )
    return curve


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("tree")
    p.add_argument("weights")
    p.add_argument("out")
    p.add_argument("--seeds", default="1993")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--eval-batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--weight-decay", type=float, default=0.0002)
    p.add_argument("--ewc-lambda", type=float, default=100.0)
    p.add_argument("--decay", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tasks", type=int, default=0, help="stop after this many tasks (0: all)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    curves = {int(s): run(int(s), args) for s in args.seeds.split(",")}
    with open(args.out, "w") as f:
        json.dump(curves, f, indent=1)
