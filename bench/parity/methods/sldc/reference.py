"""Drive the authors' SLDC code (a copy of github raoxuan98-hash/sldc_rebuttal at fe0f492,
patched by bench/parity/methods/sldc/patch.py) for the parity row
bench/parity/methods/sldc/row.py. Runs with cl-bench's interpreter and imports nothing
of cl-bench.

    python bench/parity/methods/sldc/reference.py SPEC.json OUT.pt

SPEC: ``copy`` (the patched copy), ``config`` (the official ``args``), ``inputs`` (a
``torch.save`` file: per task ``train`` {x, y} normalised images in dataset order,
``perm`` the training batch order, ``test`` {x, y} the seen classes' test images),
``init`` (per task the tensors exported from cl-bench, in cl-bench's names), ``seed``,
``tasks``, ``size`` and ``weights`` (read by the patched ``get_convnet`` through
``PARITY_IMG_SIZE`` and ``PARITY_WEIGHTS``).

The official ``SubspaceLoRA`` (``models/sldc.py``) runs its own ``incremental_train``
(``update_fc``, the previous network, ``system_training``, the compensator's
``update_stats`` and ``refine_classifiers``) and ``after_task`` for every task, with
these stand-ins, set up here without editing the copy:

* ``.cuda()`` of tensors and modules returns them on the CPU, ``args['device']`` is
  ``cpu``;
* ``models.sldc.DataLoader``: a shuffled loader reads the task's images in the order
  ``perm`` every epoch, every other loader in dataset order (no augmentation);
* the data manager: :class:`Tasks`, the inputs' images as (index, image, label);
* cl-bench's tensors copied in when a task's head exists (task 0: the LoRA factors too,
  which the official code initialises from the weights' singular vectors as cl-bench
  does, up to the vectors' signs);
* before each refinement (``train_classifier_with_cached_samples``) the generator seeded
  with ``seed`` and the cached pool set to ``torch.randn(C, 1024, d)`` of that generator,
  class by class, cl-bench's draws (official: one pool of 50,000 rows read from
  ``cached_Gaussian_samples.pt`` or drawn at task 0);
* the test images classified by the linear-compensated classifier ``linear_fc``, as
  cl-bench classifies by its unified classifier.

OUT: after the first optimizer step and after each task, the LoRA factors, every head
block, the head's scales (and after a task the unified classifier) in cl-bench's names,
the loss of the last training step, the test logits over the seen classes, and the
label of every training image in batch order.
"""

from __future__ import annotations

import json
import os
import sys
import types

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SAMPLES = 1024  # per class, train_classifier_with_cached_samples


def ours_name(name: str) -> str | None:
    """The official name of a compared tensor -> cl-bench's (None: not compared)."""
    p = name.split(".")
    if p[0] == "convnet" and "lora" in p[-1]:
        block, part = p[2], p[-1]
        layer = {"lora_A": "attn_qkv", "lora_B": "attn_qkv"}.get(part)
        layer = layer or {"1": "mlp_fc1", "2": "mlp_fc2"}[part.split("_")[1]]
        return f"lora.{block}_{layer}.{part[-1]}"
    return None


def tensors(network: nn.Module, unified: nn.Module | None = None) -> dict[str, torch.Tensor]:
    out = {}
    for name, value in network.named_parameters():
        ours = ours_name(name)
        if ours is not None:
            out[ours] = value.detach().clone()
    for k, head in enumerate(network.fc.heads):
        out[f"head.{k}"] = head.weight.detach().clone()
    out["head_scale"] = network.fc.head_weights.detach().clone()
    if unified is not None:
        out["unified.weight"] = torch.cat([h.weight for h in unified.heads]).detach().clone()
        out["unified.scale"] = unified.head_weights.detach().clone()
    return out


class Images(Dataset):
    """(index, image, label) as the official datasets give them."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor | None = None):
        self.x, self.y, self.perm = x, y, perm

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return i, self.x[i], int(self.y[i])


class Tasks:
    """What the official ``SubspaceLoRA`` asks of its ``DataManager``."""

    dataset_name = "parity"

    def __init__(self, inputs: list[dict]) -> None:
        self.inputs = inputs
        self.nb_tasks = len(inputs)

    def get_task_size(self, task: int) -> int:
        return len(self.inputs[task]["train"]["y"].unique())

    def get_dataset(self, classes, source: str, mode: str, appendent=None, with_raw=False):
        wanted = torch.as_tensor(classes)
        if source == "test":
            part = self.inputs[-1]["test"]
            keep = torch.isin(part["y"], wanted)
            return Images(part["x"][keep], part["y"][keep])
        for task in self.inputs:
            part = task["train"]
            if torch.isin(part["y"], wanted).all():
                return Images(part["x"], part["y"], task["perm"] if mode == "train" else None)
        raise KeyError(f"no training images of classes {list(classes)}")


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    out_path = os.path.abspath(out_path)
    torch.set_num_threads(1)
    os.environ.update(PARITY_IMG_SIZE=str(spec["size"]), PARITY_WEIGHTS=spec["weights"])
    run_dir = os.path.join(os.path.dirname(os.path.abspath(out_path)), "sldc_reference_run")
    os.makedirs(run_dir, exist_ok=True)
    os.chdir(run_dir)  # the official checkpoints and cached pool go here
    sys.path.insert(0, spec["copy"])
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.cuda = lambda self, *a, **k: self
    from models import sldc, sldc_modules
    from utils import inc_net

    inputs, init = torch.load(spec["inputs"]), torch.load(spec["init"])
    seed = spec["seed"]
    out: dict = {"points": {}, "batch_labels": []}
    state: dict = {"loss": None, "kd": 0.0}
    config = spec["config"]

    def loader(dataset, batch_size, shuffle=False, num_workers=0):
        if shuffle:
            out["batch_labels"].append(dataset.y[dataset.perm])
            return DataLoader(dataset, batch_size=batch_size, sampler=dataset.perm.tolist())
        return DataLoader(dataset, batch_size=batch_size, shuffle=False)

    sce = sldc.symmetric_cross_entropy_loss

    def recorded_sce(*args, **kwargs):
        loss = sce(*args, **kwargs)
        state["loss"] = float(loss.detach()) + state["kd"]
        state["kd"] = 0.0
        return loss

    kd, norm = sldc.SubspaceLoRA.calculate_kd_loss, sldc.SubspaceLoRA.calculate_norm_loss

    def recorded_kd(self, *args):
        loss = kd(self, *args)
        state["kd"] += config["gamma_kd"] * float(loss.detach())
        return loss

    def recorded_norm(self, *args):
        loss = norm(self, *args)
        state["kd"] += config["gamma_norm"] * float(loss.detach())
        return loss

    class AdamW(torch.optim.AdamW):
        def step(self, *args, **kwargs):
            done = super().step(*args, **kwargs)
            if "step 1" not in out["points"]:
                out["points"]["step 1"] = {
                    "params": tensors(learner._network),
                    "loss": state["loss"],
                }
            return done

    optim = types.ModuleType("optim")
    optim.__dict__.update(torch.optim.__dict__)
    optim.AdamW = AdamW

    update_fc = inc_net.FinetuneIncrementalNet.update_fc

    def exported_fc(self, *args, **kwargs):
        update_fc(self, *args, **kwargs)
        task = len(self.fc.heads) - 1
        named = dict(self.named_parameters())
        reverse = {ours_name(n): n for n in named if ours_name(n)}
        with torch.no_grad():
            for name, value in init[str(task)].items():
                if name.startswith("head."):
                    self.fc.heads[task].weight.copy_(value)
                else:
                    named[reverse[name]].copy_(value)

    refine = sldc_modules.SLDC_Drift_Compensator.train_classifier_with_cached_samples

    def seeded_refine(self, fc, stats):
        torch.manual_seed(seed)
        d = next(iter(stats.values())).mean.shape[0]
        self.cached_Z = torch.randn(len(stats), SAMPLES, d).flatten(0, 1)
        return refine(self, fc, stats)

    sldc.DataLoader = loader
    sldc.optim = optim
    sldc.symmetric_cross_entropy_loss = recorded_sce
    sldc.SubspaceLoRA.calculate_kd_loss = recorded_kd
    sldc.SubspaceLoRA.calculate_norm_loss = recorded_norm
    inc_net.FinetuneIncrementalNet.update_fc = exported_fc
    sldc_modules.SLDC_Drift_Compensator.train_classifier_with_cached_samples = seeded_refine
    learner = sldc.SubspaceLoRA(config)
    learner.log_path = run_dir
    for t in range(spec["tasks"]):
        learner.incremental_train(Tasks(inputs[: t + 1]))
        net = learner._network.eval()
        with torch.no_grad():
            features = torch.cat(
                [net.convnet(x)["features"] for x in inputs[t]["test"]["x"].split(48)]
            )
            logits = learner.linear_fc(features)
        out["points"][f"task {t + 1}"] = {
            "params": tensors(net, learner.linear_fc),
            "loss": state["loss"],
            "logits": logits,
        }
        learner.after_task()
    torch.save(out, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
