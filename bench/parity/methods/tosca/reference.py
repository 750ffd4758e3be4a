"""Drive the official TOSCA code (a copy patched by bench/parity/methods/tosca/patch.py) for
the parity row bench/parity/methods/tosca/row.py. Runs with an interpreter that has the
official code's dependencies (timm >= 1.0: it calls ``VisionTransformer.pool``) and
imports nothing of cl-bench; the row sets PARITY_TREE, PARITY_WEIGHTS, PARITY_IMG_SIZE
(and PARITY_FP16_FEATURES).

    python bench/parity/methods/tosca/reference.py SPEC.json OUT.pt

SPEC: ``copy`` (the patched copy), ``work`` (its working folder: the official code
writes ``tosca/task<i>.pth`` and ``logs/`` there), ``config`` (the official JSON
config's keys), ``class_order``, ``mode``:

- ``"seed"``: ``trainer._train`` as it is, one seed; OUT holds the top-1 accuracy over
  the seen classes after each task (``curve``, unrounded) and the accuracy on the
  newest task's classes (``new_task``).
- ``"step"``: the step check, for the first two tasks. Training uses the test
  transform (no augmentation), the batches ``orders[task][epoch]`` (lists of image
  paths relative to PARITY_TREE) and, before each task, the initial tensors ``init``
  (a ``torch.save`` file: per task the LuCA state in cl-bench's names, and for the
  first task the classifier rows). OUT holds, after the first optimizer step and
  after each task, every trainable tensor in cl-bench's names (``luca.<k>.<name>``,
  ``classifier.weight``, ``classifier.sigma``), the losses of every step and the test
  logits of the selected prediction path (after the entropy selection).
"""

from __future__ import annotations

import json
import os
import sys

import torch
from torch.utils.data import DataLoader

# official LuCA submodule names -> cl-bench's (cl_bench/strategies/luca.py)
NAMES = {"norm": "norm", "mlp": "adapter", "se": "calibrator"}
PREFIX = "backbone.tosca."


def ours(name: str) -> str:
    """``backbone.tosca.mlp.0.weight`` -> ``adapter.0.weight``."""
    head, _, rest = name[len(PREFIX) :].partition(".")
    return f"{NAMES[head]}.{rest}"


def theirs(name: str) -> str:
    head, _, rest = name.partition(".")
    return {v: k for k, v in NAMES.items()}[head] + "." + rest


class FixedBatches:
    """Batch sampler: epoch e yields ``orders[e]`` (dataset indices) in chunks of
    ``size``, the last chunk short, as a shuffled DataLoader without drop_last."""

    def __init__(self, orders: list[list[int]], size: int) -> None:
        self.orders, self.size, self.epoch = orders, size, 0

    def __len__(self) -> int:
        return -(-len(self.orders[0]) // self.size)

    def __iter__(self):
        order = self.orders[self.epoch]
        self.epoch += 1
        for start in range(0, len(order), self.size):
            yield order[start : start + self.size]


class Stop(Exception):
    """Raised after the second task of the step check."""


def snapshot(learner) -> dict[str, torch.Tensor]:
    """Every trained tensor: each stored LuCA module (from its task file), the
    classifier's rows and scale."""
    state = {}
    for k in range(learner._cur_task + 1):
        saved = torch.load(f"tosca/task{k}.pth", map_location="cpu")
        state |= {f"luca.{k}.{ours(n)}": v.detach().clone() for n, v in saved.items()}
    state["classifier.weight"] = learner._network.fc.weight.detach().clone()
    state["classifier.sigma"] = learner._network.fc.sigma.detach().clone()
    return state


def step_hooks(mt, spec: dict, out: dict) -> None:
    """Fixed batches, exported initial tensors, and the records of the step check."""
    orders, init = spec["orders"], torch.load(spec["init"])
    size = spec["config"]["batch_size"]
    test_logits: list[torch.Tensor] = []
    train = mt.Learner._train
    lowentropy = mt.Learner.get_lowentropy_logits
    eval_task = mt.Learner.eval_task

    def fixed_train(self):
        t = self._cur_task
        tree = os.environ["PARITY_TREE"]
        index = {os.path.relpath(p, tree): i for i, p in enumerate(self.train_dataset.images)}
        batches = FixedBatches([[index[p] for p in epoch] for epoch in orders[t]], size)
        self.train_loader = DataLoader(self.train_dataset, batch_sampler=batches)
        self.train_loader_for_protonet = DataLoader(
            self.train_loader_for_protonet.dataset, batch_size=size, shuffle=False
        )
        tosca = self._network.backbone.tosca
        tosca.load_state_dict({theirs(n): v for n, v in init[t]["luca"].items()})
        if "classifier.weight" in init[t]:
            self._network.fc.weight.data.copy_(init[t]["classifier.weight"])
        out["losses"].append([])
        train(self)

    def after_step(self, loss):
        out["losses"][-1].append(loss.item())
        if "step 1" in out:
            return
        self._network.eval()
        with torch.no_grad():
            logits = torch.cat([self._network(x)["logits"] for _, x, _ in self.test_loader])
        self._network.train()
        tosca = self._network.backbone.tosca.state_dict()
        params = {f"luca.0.{ours(PREFIX + n)}": v.detach().clone() for n, v in tosca.items()}
        params["classifier.weight"] = self._network.fc.weight.detach().clone()
        params["classifier.sigma"] = self._network.fc.sigma.detach().clone()
        out["step 1"] = {"params": params, "loss": [loss.item()], "logits": logits}

    def record_lowentropy(self, inputs):
        logits = lowentropy(self, inputs)
        test_logits.append(logits.detach().clone())
        return logits

    def record_eval(self):
        test_logits.clear()
        result = eval_task(self)
        t = self._cur_task
        out[f"task {t + 1}"] = {
            "params": snapshot(self),
            "loss": out["losses"][t],
            "logits": torch.cat(test_logits),
            "labels": torch.as_tensor(self.test_loader.dataset.labels),
        }
        if t == 1:
            raise Stop
        return result

    mt.Learner._train = fixed_train
    mt.Learner.parity_after_step = after_step
    mt.Learner.get_lowentropy_logits = record_lowentropy
    mt.Learner.eval_task = record_eval


def seed_hooks(mt, out: dict) -> None:
    """Record the unrounded top-1 accuracies of every evaluation."""
    eval_cnn = mt.Learner._eval_cnn

    def record(self, loader):
        y_pred, y_true = eval_cnn(self, loader)
        hit = y_pred[:, 0] == y_true
        out["curve"].append(100.0 * float(hit.mean()))
        new = y_true >= self._known_classes
        out["new_task"].append(100.0 * float(hit[new].mean()))
        return y_pred, y_true

    mt.Learner._eval_cnn = record


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    torch.set_num_threads(1)
    sys.path.insert(0, spec["copy"])
    os.makedirs(spec["work"], exist_ok=True)
    os.chdir(spec["work"])
    import models.tosca as mt
    import trainer
    import utils.data as ud

    ud.iParity.class_order = list(spec["class_order"])
    out: dict = {"losses": []} if spec["mode"] == "step" else {"curve": [], "new_task": []}
    if spec["mode"] == "step":
        ud.iParity.train_trsf = ud.iParity.test_trsf  # augmentation off
        step_hooks(mt, spec, out)
    else:
        seed_hooks(mt, out)
    args = dict(
        spec["config"],
        dataset="parity",
        shuffle=False,
        model_name="tosca",
        backbone_type="parity_vit_tiny",
        device=[-1],
        seed=[spec["seed"]],
    )
    try:
        trainer.train(args)
    except Stop:
        pass
    torch.save(out, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
