"""Avalanche 0.6.0's own ``EWC`` (and ``Naive``) strategy driven on the inputs the
EWC parity row (bench/parity/methods/ewc/row.py) writes, run with the reference's
interpreter (bench/.venv-avalanche). Nothing of cl-bench is imported here; the
strategies are used as Avalanche ships them (not subclassed): only the model, the
data, the optimizer, an observing plugin and one that reorders a task's samples
are ours.

    python bench/parity/methods/ewc/reference.py step IN.pt OUT.pt
    python bench/parity/methods/ewc/reference.py paired IN.pt OUT.pt

IN.pt holds the backbone's state dict (timm ``tf_efficientnet_lite0`` without its
classifier, exported from cl-bench), the input scaling, the data (uint8 images,
labels already mapped to positions in the class order, the tasks' label lists)
and the settings. ``step`` trains the first ``step_tasks`` tasks, starting the head
from cl-bench's initial head (ten rows from the start, so it never grows), feeds the
tasks' samples in their stored order (``shuffle=False``) and dumps parameters, losses
and test logits after the first optimizer step and after each task, the EWC
importances after task 1 and the per-step loss split (total, cross-entropy).
``paired`` runs every task with each strategy named in ``heads`` (``ewc``, ``naive``)
on the same machinery, starting from that head (cl-bench's, drawn from the seed) and
reading each task's samples in the order ``perms[t]`` (drawn by cl-bench from the
seed; the same order every epoch), and dumps the seen classes' test logits after each
task and the trainable tensors after the last.
``reset_optimizer_state`` (Avalanche's own ``train()`` argument) says whether the
optimizer's state (SGD's momentum, Adam's moments; ``params.optimizer`` picks SGD or
Adam as cl-bench builds them) is reset at each experience, as cl-bench's fresh
optimizer per task, or kept, Avalanche's default.

The pieces shared with the row (data, recorder, reordering, accuracies) are importable
without timm.
"""

from __future__ import annotations

import sys

import torch
from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.benchmarks.scenarios.supervised import with_classes_timeline
from avalanche.benchmarks.utils.classification_dataset import (
    _make_taskaware_tensor_classification_dataset as tensor_dataset,
)
from avalanche.core import SupervisedPlugin
from torch import nn

HEAD = "head.classifier."  # IncrementalClassifier's Linear; cl-bench's head is "head."


def scaled(x: torch.Tensor) -> torch.Tensor:
    """uint8 (N, 3, H, W) at the model's size -> float in [0, 1] (cl-bench's
    ToModelInput at the native size: no resize)."""
    return x.float().div_(255.0)


def task_experiences(data: dict) -> list:
    """One training experience per task: the task's samples in their stored order,
    as cl-bench's build_stream keeps them; labels are positions in the class order."""
    train = []
    test = []
    for labels in data["tasks"]:
        for split, out in (("train", train), ("test", test)):
            y = data[f"{split}_y"]
            idx = torch.nonzero(torch.isin(y, torch.tensor(labels))).squeeze(1)
            out.append(
                tensor_dataset(
                    scaled(data[f"{split}_x"][idx]), y[idx], task_labels=0, targets=y[idx]
                )
            )
    bench = with_classes_timeline(benchmark_from_datasets(train=train, test=test))
    return list(bench.train_stream)


def seen_test(data: dict, n_tasks: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Test images and labels of the first ``n_tasks`` tasks, and their labels."""
    labels = [c for t in data["tasks"][:n_tasks] for c in t]
    idx = torch.nonzero(torch.isin(data["test_y"], torch.tensor(labels))).squeeze(1)
    return scaled(data["test_x"][idx]), data["test_y"][idx], labels


@torch.no_grad()
def logits_of(model: nn.Module, x: torch.Tensor, columns: list[int], batch: int) -> torch.Tensor:
    """Eval-mode logits of the ``columns`` (the seen classes) in batches; the model
    is put back in training mode after."""
    was_training = model.training
    model.eval()
    out = torch.cat([model(x[i : i + batch])[:, columns] for i in range(0, len(x), batch)])
    model.train(was_training)
    return out


def trainable(model: nn.Module) -> dict[str, torch.Tensor]:
    """Trainable tensors under cl-bench's names (the head's rows as ``head.*``)."""
    return {
        k.replace(HEAD, "head."): p.detach().clone()
        for k, p in model.named_parameters()
        if p.requires_grad
    }


class Recorder(SupervisedPlugin):
    """Observes a strategy, changes nothing: each step's total loss (after every
    plugin's ``before_backward``, so with the EWC penalty) and its cross-entropy, and
    after the first optimizer step the parameters and the test logits of task 1."""

    def __init__(self, data: dict, eval_batch: int) -> None:
        super().__init__()
        self.data, self.eval_batch = data, eval_batch
        self.total: list[list[float]] = []
        self.ce: list[list[float]] = []
        self.first: dict | None = None

    def before_training_exp(self, strategy, **kwargs) -> None:
        self.total.append([])
        self.ce.append([])

    def before_update(self, strategy, **kwargs) -> None:
        self.total[-1].append(float(strategy.loss.detach()))
        with torch.no_grad():
            self.ce[-1].append(float(strategy._criterion(strategy.mb_output, strategy.mb_y)))

    def after_update(self, strategy, **kwargs) -> None:
        if self.first is None:
            x, _, labels = seen_test(self.data, 1)
            self.first = {
                "params": trainable(strategy.model),
                "logits": logits_of(strategy.model, x, labels, self.eval_batch),
            }


def build_model(payload: dict, n_out: int) -> nn.Module:
    """timm's tf_efficientnet_lite0 (cl-bench's weights) + Avalanche's growing,
    masked head, inputs scaled as cl-bench's backbone does, channels_last as
    cl-bench runs a CNN (the same convolution kernels, hence the same round-off)."""
    import timm
    from avalanche.models import IncrementalClassifier

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = timm.create_model(
                "tf_efficientnet_lite0", pretrained=False, num_classes=0
            )
            self.backbone.load_state_dict(payload["backbone"], strict=True)
            self.backbone.to(memory_format=torch.channels_last)
            self.head = IncrementalClassifier(
                self.backbone.num_features, initial_out_features=n_out
            )
            self.mean = torch.tensor(payload["mean"]).view(1, 3, 1, 1)
            self.std = torch.tensor(payload["std"]).view(1, 3, 1, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = ((x - self.mean) / self.std).contiguous(memory_format=torch.channels_last)
            return self.head(
                self.backbone.forward_head(self.backbone.forward_features(x), pre_logits=True)
            )

    return Net()


def build_strategy(payload: dict, method: str, model: nn.Module, plugins: list):
    from avalanche.training.plugins.evaluation import EvaluationPlugin
    from avalanche.training.supervised import EWC, Naive

    p = payload["params"]
    if p.get("optimizer", "sgd") == "adam":  # as cl-bench's contract/optimizer.py builds it
        optimizer = torch.optim.Adam(model.parameters(), lr=p["lr"], weight_decay=p["weight_decay"])
    else:
        optimizer = torch.optim.SGD(
            model.parameters(), lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"]
        )
    common = dict(
        train_mb_size=p["batch_size"],
        train_epochs=p["epochs"],
        eval_mb_size=p["eval_batch_size"],
        device="cpu",
        plugins=plugins,
        evaluator=EvaluationPlugin(loggers=[]),
    )
    if method == "naive":
        return Naive(model, optimizer, nn.CrossEntropyLoss(), **common)
    return EWC(
        model,
        optimizer,
        nn.CrossEntropyLoss(),
        ewc_lambda=p["ewc_lambda"],
        mode="online",
        decay_factor=p["decay_factor"],
        **common,
    )


class Reorder(SupervisedPlugin):
    """Feeds task t's training samples in the order ``perms[t]`` (with
    ``shuffle=False``: the same order every epoch); the EWC importances still read the
    experience's dataset in stored order, as Avalanche's plugin does."""

    def __init__(self, perms: list[torch.Tensor]) -> None:
        super().__init__()
        self.perms = perms

    def after_train_dataset_adaptation(self, strategy, **kwargs) -> None:
        perm = self.perms[strategy.experience.current_experience].tolist()
        strategy.adapted_dataset = strategy.adapted_dataset.subset(perm)


def with_head(payload: dict, head: dict) -> nn.Module:
    """The model with cl-bench's initial head (ten rows: it never grows)."""
    model = build_model(payload, len(head["bias"]))
    with torch.no_grad():
        model.head.classifier.weight.copy_(head["weight"])
        model.head.classifier.bias.copy_(head["bias"])
    return model


def accuracies(data: dict, logits: list[torch.Tensor]) -> dict:
    """From the seen classes' test logits after each task: ``curve``, the top-1
    accuracy (percent) over the seen classes, and ``just_learnt``, the accuracy on the
    test images of the task just trained (predictions over all seen classes)."""
    out = {"curve": [], "just_learnt": []}
    for t, task_logits in enumerate(logits):
        _, y, labels = seen_test(data, t + 1)
        right = torch.tensor(labels)[task_logits.argmax(1)] == y
        newest = torch.isin(y, torch.tensor(data["tasks"][t]))
        out["curve"].append(100.0 * int(right.sum()) / len(right))
        out["just_learnt"].append(100.0 * int(right[newest].sum()) / int(newest.sum()))
    return out


def step(payload: dict) -> dict:
    """The step check's reference side (see the module docstring)."""
    model = with_head(payload, payload["head"])
    data, batch = payload["data"], payload["params"]["eval_batch_size"]
    recorder = Recorder(data, batch)
    strategy = build_strategy(payload, "ewc", model, [recorder])
    out = {"after_task": [], "importances": None}
    for t, exp in enumerate(task_experiences(data)[: payload["step_tasks"]]):
        strategy.train(
            exp,
            shuffle=False,
            num_workers=0,
            reset_optimizer_state=payload["reset_optimizer_state"],
        )
        x, _, labels = seen_test(data, t + 1)
        out["after_task"].append(
            {"params": trainable(model), "logits": logits_of(model, x, labels, batch)}
        )
        if t == 0:
            ewc = next(p for p in strategy.plugins if hasattr(p, "importances"))
            out["importances"] = {
                k.replace(HEAD, "head."): v.data.clone() for k, v in ewc.importances[0].items()
            }
    out.update(first=recorder.first, total=recorder.total, ce=recorder.ce)
    return out


def paired(payload: dict, method: str) -> dict:
    """Every task with ``method`` from cl-bench's head and batch order (see the module
    docstring): the seen classes' test logits after each task, the tensors after the
    last."""
    model = with_head(payload, payload["heads"][method])
    data, batch = payload["data"], payload["params"]["eval_batch_size"]
    strategy = build_strategy(payload, method, model, [Reorder(payload["perms"])])
    logits = []
    for t, exp in enumerate(task_experiences(data)):
        strategy.train(
            exp,
            shuffle=False,
            num_workers=0,
            reset_optimizer_state=payload["reset_optimizer_state"],
        )
        x, _, labels = seen_test(data, t + 1)
        logits.append(logits_of(model, x, labels, batch))
    return {"logits": logits, "params": trainable(model)}


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, source, target = sys.argv[1:]
    payload = torch.load(source, weights_only=False)
    if mode == "step":
        torch.save(step(payload), target)
    else:
        torch.save({m: paired(payload, m) for m in payload["heads"]}, target)
