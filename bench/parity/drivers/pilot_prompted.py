"""Drive LAMDA-PILOT's L2P or DualPrompt (github sun-hailong/LAMDA-PILOT at 2647455,
``models/l2p.py`` / ``models/dualprompt.py`` ``Learner``) from cl-bench's initial
trainable tensors, for bench/parity/prompted.py. Runs with the reference's
interpreter, in the scratch copy of PILOT (patched by the row's ``prepare``):

    python DRIVER step CONFIG OVERRIDES INIT BATCHES OUT
    python DRIVER run  CONFIG OVERRIDES INIT OUT

CONFIG: PILOT's JSON (``exps/parity_l2p.json``); OVERRIDES: a JSON object of settings
that replace CONFIG's; INIT: cl-bench's initial trainable tensors (a ``.pt`` dict in
cl-bench's names and layout, :data:`LAYOUT`), written into PILOT's network before
anything trains.

``step``: PILOT's own ``Learner._train`` (optimizer, prompt transfer, loss, Adam
steps) on the fixed batches of BATCHES (a ``.pt`` list of tasks, each
``{"classes", "train": [(x, y), ...], "test": [(x, y), ...]}``: augmentation off,
the order fixed), task after task. OUT (``.pt``) holds, after the first optimizer
step and after each task: the trainable tensors in cl-bench's layout, the losses
PILOT back-propagated, and the test logits over the classes seen. With the
environment variable PARITY_DTYPE=float64 the network, the images and Adam run in
float64 (the float64 check of bench/parity/prompted.py).

``run``: PILOT's ``trainer._train`` end to end (its own data, transforms, batch
order); OUT (JSON) holds the top-1 curve and the per-task accuracies after each
task.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd()))

import trainer  # noqa: E402  (PILOT's modules, from the copy this runs in)
from models.base import BaseLearner  # noqa: E402
from utils import factory  # noqa: E402


def pilot_tensors(backbone) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """cl-bench name -> (PILOT's parameter, the offset that maps PILOT's value to
    cl-bench's). L2P's PILOT adds the [CLS] position entry to every prompt token
    (its position table has a copy of it per prompt slot) where cl-bench adds none:
    the same function when PILOT's prompt is cl-bench's minus that entry, and since
    the entry is frozen the two get the same gradients and Adam steps."""
    out = {"head.weight": (backbone.head.weight, None), "head.bias": (backbone.head.bias, None)}
    if hasattr(backbone, "e_prompt"):  # DualPrompt: (layers, 2, [pool,] L, heads, head_dim)
        out["g"] = (backbone.g_prompt, None)
        out["e"] = (backbone.e_prompt.prompt, None)
        out["keys.keys"] = (backbone.e_prompt.prompt_key, None)
        return out
    slots = backbone.pos_embed[0, 1 : 1 + backbone.prompt.length * backbone.prompt.top_k]
    if not torch.equal(slots, slots[:1].expand_as(slots)):
        raise SystemExit(
            "L2P's prompt position slots differ; the parity loader fills them "
            "with the [CLS] entry (bench/parity/patch_pilot.py)"
        )
    out["prompts"] = (backbone.prompt.prompt, slots[0].detach().clone())
    out["keys.keys"] = (backbone.prompt.prompt_key, None)
    return out


def load_init(learner, path: str) -> None:
    """cl-bench's initial tensors into PILOT's network (reshaped to PILOT's layout)."""
    init = torch.load(path, weights_only=True)
    tensors = pilot_tensors(learner._network.backbone)
    if set(init) != set(tensors):
        raise SystemExit(f"initial tensors {sorted(init)} do not match {sorted(tensors)}")
    with torch.no_grad():
        for name, (param, offset) in tensors.items():
            value = init[name] if offset is None else init[name] - offset
            param.copy_(value.reshape(param.shape))


def ours(learner, layout: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    """PILOT's trainable tensors in cl-bench's names and shapes."""
    out = {}
    for name, (param, offset) in pilot_tensors(learner._network.backbone).items():
        value = param.detach().clone().reshape(layout[name])
        out[name] = value if offset is None else value + offset
    return out


def test_logits(learner, batches) -> torch.Tensor:
    """PILOT's ``_eval_cnn`` forward: logits over the classes seen, eval mode."""
    network = learner._network
    was_training = network.backbone.training
    network.eval()
    with torch.no_grad():
        logits = torch.cat(
            [
                network(x, task_id=learner._cur_task)["logits"][:, : learner._total_classes]
                for x, _ in batches
            ]
        )
    network.backbone.train(was_training)
    return logits


def settings(config: str, overrides: str) -> dict:
    args = json.loads(Path(config).read_text())
    args.update(json.loads(overrides))
    return args


def step(config: str, overrides: str, init: str, batches: str, out: str) -> None:
    args = settings(config, overrides)
    trainer._set_device(args)
    torch.set_num_threads(1)
    if os.environ.get("PARITY_DTYPE") == "float64":
        torch.set_default_dtype(torch.float64)
    tasks = torch.load(batches, weights_only=True)
    for task in tasks["tasks"]:
        for split in ("train", "test"):
            task[split] = [(x.to(torch.get_default_dtype()), y) for x, y in task[split]]
    args["nb_classes"] = sum(len(t) for t in tasks["all_classes"])
    args["nb_tasks"] = len(tasks["all_classes"])
    learner = factory.get_model(args["model_name"], args)
    load_init(learner, init)
    layout = {k: v.shape for k, v in torch.load(init, weights_only=True).items()}
    record: dict = {}
    losses: list[float] = []
    backward = torch.Tensor.backward

    def traced_backward(tensor, *a, **k):  # the loss PILOT back-propagates
        losses.append(tensor.item())
        return backward(tensor, *a, **k)

    def after_first_step(optimizer, *_):
        if "step 1" not in record:
            record["step 1"] = {
                "params": ours(learner, layout),
                "losses": list(losses),
                "logits": test_logits(learner, current["test"]),
            }

    make_optimizer = learner.get_optimizer

    def get_optimizer():
        optimizer = make_optimizer()
        optimizer.register_step_post_hook(after_first_step)
        return optimizer

    learner.get_optimizer = get_optimizer
    torch.Tensor.backward = traced_backward
    for t, current in enumerate(tasks["tasks"]):
        losses.clear()
        learner._cur_task += 1
        learner._total_classes = learner._known_classes + len(current["classes"])
        train = [(None, x, y) for x, y in current["train"]]
        learner._train(train, [(None, x, y) for x, y in current["test"]])
        record[f"task {t + 1}"] = {
            "params": ours(learner, layout),
            "losses": list(losses),
            "logits": test_logits(learner, current["test"]),
        }
        learner.after_task()
    torch.Tensor.backward = backward
    torch.save(record, out)


def run(config: str, overrides: str, init: str, out: str) -> None:
    args = settings(config, overrides)
    torch.set_num_threads(1)
    curve: list[dict] = []
    build = factory.get_model

    def get_model(name, model_args):
        learner = build(name, model_args)
        load_init(learner, init)
        return learner

    evaluate = BaseLearner.eval_task

    def eval_task(self):
        cnn, nme = evaluate(self)
        curve.append(
            {
                "top1": float(cnn["top1"]),
                "grouped": {k: float(v) for k, v in cnn["grouped"].items()},
            }
        )
        return cnn, nme

    factory.get_model = trainer.factory.get_model = get_model
    BaseLearner.eval_task = eval_task
    trainer._train(args)
    Path(out).write_text(json.dumps(curve))


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    {"step": step, "run": run}[mode](*rest)
