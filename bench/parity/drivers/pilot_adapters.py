"""Drive LAMDA-PILOT's EASE or MOS (``models/ease.py`` / ``models/mos.py`` of
github sun-hailong/LAMDA-PILOT at commit 2647455) in a scratch copy patched by
bench/parity/patch_pilot.py and patch_pilot_ease_mos.py, for the parity rows
bench/parity/methods/ease/row.py and mos.py. Runs with the reference's interpreter in the
copy's root (its modules are imported from there); PILOT's own learner does every
step, this script only feeds it and reads it out:

    cd COPY && PARITY_TREE=... PARITY_WEIGHTS=... PARITY_IMG_SIZE=... \\
        python .../pilot_adapters.py SPEC.json OUT.pt

SPEC (JSON): ``args``, the PILOT config (exps/parity_ease.json or parity_mos.json
with the row's settings and seed); ``order``, the class order (``shuffle`` false);
``step``, ``{"init": FILE, "perm": FILE, "seed": int, "tasks": int}``: the step check
for ``tasks`` tasks (the rows' paired seeds run it for all three).

Step check: the training transform is the test transform (no augmentation), every
DataLoader runs without shuffling, the training images of task t come in the order
``perm[t]`` (an index list into PILOT's task dataset, which lists the task's classes
one after the other in file order, as cl-bench's task dataset does), the global
generator is seeded with ``seed + k`` before the k-th training forward (so the
adapters' dropout masks are cl-bench's), and at the start of task t the new
trainable tensors (EASE: the task's adapters and proxy classifier; MOS: the adapters
and head, task 0) are overwritten by cl-bench's from ``init``. MOS's classifier
alignment starts from ``torch.manual_seed(seed)``, as cl-bench's does in the row, so
both draw the same Gaussian samples and permutations. OUT holds, after the first
optimizer step and after each task: every trainable tensor (names as in the row),
the loss of the last step, the test logits that PILOT's ``_eval_cnn`` ranks (EASE
after prototype completion and reweighting, MOS after merging, alignment and
self-refined retrieval), and the labels and pixel sums of every batch.

methods/tuna/reference.py reuses :func:`evaluate` and :func:`step_check` with TUNA's
tensors, hook point and outputs; PILOT's ``trainer`` and ``factory`` are imported
only by this script's :func:`main`.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.getcwd())
torch.set_num_threads(1)

from utils.data import iParity  # noqa: E402
from utils.data_manager import DataManager  # noqa: E402


def trainable(learner) -> dict[str, torch.Tensor]:
    """The trainable tensors under the row's names: the live adapter set, then EASE's
    proxy classifier or MOS's head."""
    net = learner._network
    out = {}
    for i, adapter in enumerate(net.backbone.cur_adapter):
        for ours, theirs in (("down", adapter.down_proj), ("up", adapter.up_proj)):
            out[f"adapter.{i}.{ours}.weight"] = theirs.weight.detach().clone()
            out[f"adapter.{i}.{ours}.bias"] = theirs.bias.detach().clone()
    if learner.args["model_name"] == "ease":
        out["proxy.weight"] = net.proxy_fc.weight.detach().clone()
        out["proxy.sigma"] = net.proxy_fc.sigma.detach().clone()
    else:
        out["head.weight"] = net.backbone.head.weight.detach().clone()
        out["head.bias"] = net.backbone.head.bias.detach().clone()
    return out


@torch.no_grad()
def load_trainable(learner, tensors: dict[str, torch.Tensor]) -> None:
    """Overwrite the tensors :func:`trainable` names with ``tensors`` (those given)."""
    net = learner._network
    for i, adapter in enumerate(net.backbone.cur_adapter):
        for ours, theirs in (("down", adapter.down_proj), ("up", adapter.up_proj)):
            theirs.weight.copy_(tensors[f"adapter.{i}.{ours}.weight"])
            theirs.bias.copy_(tensors[f"adapter.{i}.{ours}.bias"])
    if learner.args["model_name"] == "ease":
        net.proxy_fc.weight.copy_(tensors["proxy.weight"])
        net.proxy_fc.sigma.copy_(tensors["proxy.sigma"])
    else:
        net.backbone.head.weight.copy_(tensors["head.weight"])
        net.backbone.head.bias.copy_(tensors["head.bias"])


def evaluate(learner, per_batch: int = 1) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """The learner's ``_eval_cnn`` on its test loader; returns the outputs it ranks
    (read from its ``torch.topk`` calls, the last of every ``per_batch``), its top-1
    predictions and the labels."""
    seen, real_topk = [], torch.topk

    def topk(outputs, *args, **kwargs):
        seen.append(outputs.detach().clone())
        return real_topk(outputs, *args, **kwargs)

    torch.topk = topk
    try:
        y_pred, y_true = learner._eval_cnn(learner.test_loader)
    finally:
        torch.topk = real_topk
    return torch.cat(seen[per_batch - 1 :: per_batch]), y_pred[:, 0], y_true


def step_check(
    learner,
    data_manager,
    step: dict,
    trainable=trainable,
    load_trainable=load_trainable,
    hooked=None,
    evaluate=evaluate,
) -> dict:
    """The step check (module docstring): ``trainable(learner)`` the tensors recorded,
    ``load_trainable(learner, tensors)`` loads a task's exported ones, the generator is
    seeded before every training forward of ``hooked`` (default the learner's
    network), ``evaluate(learner)`` gives the test outputs."""
    module = sys.modules[type(learner).__module__]
    init = torch.load(step["init"], weights_only=True)
    perm = torch.load(step["perm"], weights_only=True)
    real_loader, real_get = module.DataLoader, data_manager.get_dataset
    state = {"training": False, "forwards": 0, "steps": 0, "loss": None, "step_loss": None}
    points, sums, train_labels = {}, [], []

    def loader(dataset, batch_size, shuffle=False, num_workers=0, **kwargs):
        return real_loader(dataset, batch_size=batch_size, shuffle=False, num_workers=0)

    def get_dataset(indices, source, mode, *args, **kwargs):
        got = real_get(indices, source, mode, *args, **kwargs)
        if source == "train" and mode == "train":
            order = perm[str(learner._cur_task)].numpy()
            got.images, got.labels = got.images[order], got.labels[order]
            train_labels.append(torch.as_tensor(got.labels))
        return got

    def seed_forward(_module, args):
        if state["training"]:
            torch.manual_seed(step["seed"] + state["forwards"])
            state["forwards"] += 1
            sums.append(args[0].sum(dim=(1, 2, 3)).double())

    real_backward = torch.Tensor.backward

    def backward(tensor, *args, **kwargs):
        state["loss"] = float(tensor.detach())
        return real_backward(tensor, *args, **kwargs)

    real_optimizer = learner.get_optimizer

    def after_step(_optimizer, _args, _kwargs):
        state["steps"] += 1
        state["step_loss"] = state["loss"]
        if state["steps"] == 1:
            points["step 1"] = {"params": trainable(learner), "loss": state["loss"]}

    def get_optimizer(*args, **kwargs):
        optimizer = real_optimizer(*args, **kwargs)
        optimizer.register_step_post_hook(after_step)
        return optimizer

    real_train, real_init_train = learner._train, learner._init_train

    def train(*args, **kwargs):
        task = learner._cur_task
        if str(task) in init:
            load_trainable(learner, init[str(task)])
        return real_train(*args, **kwargs)

    def init_train(*args, **kwargs):
        state["training"] = True
        try:
            return real_init_train(*args, **kwargs)
        finally:
            state["training"] = False

    if hasattr(learner, "classifer_align"):
        real_align = learner.classifer_align

        def align(*args, **kwargs):
            torch.manual_seed(step["seed"])
            return real_align(*args, **kwargs)

        learner.classifer_align = align

    module.DataLoader = loader
    data_manager.get_dataset = get_dataset
    (hooked or learner._network).register_forward_pre_hook(seed_forward)
    torch.Tensor.backward = backward
    learner.get_optimizer, learner._train, learner._init_train = get_optimizer, train, init_train
    test_labels = []
    try:
        for task in range(step["tasks"]):
            learner.incremental_train(data_manager)
            logits, _, true = evaluate(learner)
            points[f"task {task + 1}"] = {
                "params": trainable(learner),
                "loss": state["step_loss"],
                "logits": logits,
            }
            test_labels.append(torch.as_tensor(true))
            learner.after_task()
    finally:
        torch.Tensor.backward = real_backward
    return {
        "points": points,
        "batch_sums": sums,
        "train_labels": train_labels,
        "test_labels": test_labels,
    }


def main(spec_path: str, out_path: str) -> None:
    import trainer
    from utils import factory

    with open(spec_path) as f:
        spec = json.load(f)
    args, step = spec["args"], spec["step"]
    iParity.class_order = spec["order"]
    iParity.train_trsf = iParity.test_trsf
    trainer._set_random(args["seed"])
    trainer._set_device(args)
    data_manager = DataManager(
        args["dataset"], args["shuffle"], args["seed"], args["init_cls"], args["increment"], args
    )
    args["nb_classes"], args["nb_tasks"] = data_manager.nb_classes, data_manager.nb_tasks
    learner = factory.get_model(args["model_name"], args)
    torch.save(step_check(learner, data_manager, step), out_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
