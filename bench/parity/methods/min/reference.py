"""Drive the authors' MiN code (a copy of github thuwng/MiN-NeurIPS2025 at 292d883
patched by bench/parity/methods/min/patch.py) for the parity row bench/parity/methods/min/row.py.
Runs with cl-bench's interpreter (timm 1.0.31: ``MiN/backbones/ViT_MiN.py`` imports
``timm.layers``, absent from bench/.venv-avalanche's timm 0.6.13) and imports nothing
of cl-bench; the row sets PARITY_WEIGHTS and PARITY_IMG_SIZE.

    python bench/parity/methods/min/reference.py SPEC.json OUT.pt

SPEC: ``copy`` (the patched copy), ``args`` (the official JSON config's keys),
``inputs`` (a ``torch.save`` file: per task ``train`` {x, y} normalised images in
dataset order, ``perm`` the training batch order, ``test`` {x, y} the seen classes'
test images), ``init`` (per task the tensors exported from cl-bench, in cl-bench's
names), ``tasks``. The official ``MinNet.init_train`` / ``increment_train`` run as they
are on those tensors: the training loader reads the task's images in the order
``perm`` every epoch (official: shuffled), every other loader in dataset order, and
before each task's training the exported tensors replace the fresh ones (the first
task: every M_l, A_l, B_l, the norms, the projection P, the first noise pair and the
head). OUT: after the first optimizer step and after each task, every trainable
tensor in cl-bench's names (as it is at the end of the task's training), the loss, the
test logits over the seen classes, and the label of every training image in batch
order.

The official ``utils/inc_net.py`` imports ``einops`` (unused; not in cl-bench's
interpreter) and ``models/MiN.py`` imports ``data_process/data_manger.py`` (unused
there; it imports ``sympy``): both are empty stand-ins here, and the tasks come from
:class:`Tasks` instead of the official ``DataManger``.
"""

from __future__ import annotations

import json
import logging
import sys
import types

import torch
from torch.utils.data import DataLoader, Dataset

DEPTH = 12


def stand_in(name: str, **attrs) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


def ref_name(name: str) -> str:
    """cl-bench's name (cl_bench/strategies/min.py ``MinNet``) -> the official one
    (``MiNbaseNet``)."""
    p = name.split(".")
    if p[0] == "head":
        return f"normal_fc.{p[1]}"
    if p[0] == "projection":
        return "buffer.weight"
    if p[0] == "layers":
        return (
            f"backbone.noise_maker.{p[1]}."
            + {"mlp": f"MLP.{p[-1]}", "down": "w_down", "up": "w_up"}[p[2]]
        )
    if p[0] == "sets":
        task, block, part, what = p[1:]
        return f"backbone.noise_maker.{block}.{'mu' if part == 'mu' else 'sigmma'}.{task}.{what}"
    if p[0] == "norms":
        i = int(p[1])
        return (
            f"backbone.norm.{p[2]}"
            if i == 2 * DEPTH
            else f"backbone.blocks.{i // 2}.norm{i % 2 + 1}.{p[2]}"
        )
    raise KeyError(name)


def ours_name(name: str) -> str:
    """The official name of a trainable tensor -> cl-bench's."""
    p = name.split(".")
    if p[0] == "normal_fc":
        return f"head.{p[1]}"
    p = p[1:]
    if p[0] == "noise_maker":
        if p[2] == "MLP":
            return f"layers.{p[1]}.mlp.{p[3]}"
        return f"sets.{p[3]}.{p[1]}.{'mu' if p[2] == 'mu' else 'sigma'}.{p[4]}"
    if p[0] == "blocks":
        return f"norms.{2 * int(p[1]) + int(p[2][-1]) - 1}.{p[3]}"
    if p[0] == "norm":
        return f"norms.{2 * DEPTH}.{p[1]}"
    raise KeyError(name)


def tensor(net: torch.nn.Module, dotted: str) -> torch.Tensor:
    """A parameter, buffer or plain tensor attribute (``w_down``) by its dotted name."""
    path, _, attr = dotted.rpartition(".")
    return getattr(net.get_submodule(path), attr)


def trainable(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {ours_name(n): p.detach().clone() for n, p in net.named_parameters() if p.requires_grad}


class Images(Dataset):
    """(index, image, label) as the official datasets give them; ``labels`` mutable."""

    def __init__(self, part: dict, perm: torch.Tensor | None = None) -> None:
        self.x, self.labels, self.perm = part["x"], part["y"].numpy().copy(), perm

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return i, self.x[i], int(self.labels[i])


class Tasks:
    """What ``init_train`` / ``increment_train`` ask of the official ``DataManger``:
    task t's lists are ``t``; labels are already classifier columns."""

    def __init__(self, inputs: list[dict]) -> None:
        self.inputs = inputs

    def get_task_list(self, task: int):
        return task, task, [f"task {task}"]

    def get_task_data(self, source: str, class_list: int) -> Images:
        part = self.inputs[class_list]
        return Images(part["test"]) if source == "test" else Images(part["train"], part["perm"])

    @staticmethod
    def map_cat2order(label):
        return label


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    torch.set_num_threads(1)
    sys.path.insert(0, f"{spec['copy']}/MiN")
    for name in ("einops", "einops.layers"):
        stand_in(name)
    stand_in("einops.layers.torch", Rearrange=None, Reduce=None)
    sys.modules["einops"].__dict__.update(rearrange=None, reduce=None, repeat=None)
    stand_in("data_process.data_manger", DataManger=None)
    import models.MiN as mt

    args = spec["args"]
    inputs, init = torch.load(spec["inputs"]), torch.load(spec["init"])
    out: dict = {"points": {}, "batch_labels": []}
    losses: list[float] = []

    def loader(dataset, batch_size, shuffle=False, num_workers=0):
        if shuffle and batch_size == args["batch_size"]:
            out["batch_labels"].append(torch.as_tensor(dataset.labels)[dataset.perm])
            return DataLoader(dataset, batch_size=batch_size, sampler=dataset.perm.tolist())
        return DataLoader(dataset, batch_size=batch_size, shuffle=False)

    run = mt.MinNet.run

    def exported_run(self, train_loader):
        net = self._network
        with torch.no_grad():
            for name, value in init[str(self.cur_task)].items():
                tensor(net, ref_name(name)).copy_(value)
        run(self, train_loader)
        out["params"] = trainable(net)

    def after_step(self, loss):
        losses.append(float(loss))
        if "step 1" not in out["points"]:
            out["points"]["step 1"] = {"params": trainable(self._network), "loss": float(loss)}

    mt.DataLoader = loader
    mt.MinNet.run = exported_run
    mt.MinNet.parity_after_step = after_step
    learner = mt.MinNet(args, logging.getLogger("min_ref"))
    tasks = Tasks(inputs)
    for t in range(spec["tasks"]):
        (learner.init_train if t == 0 else learner.increment_train)(tasks)
        net = learner._network.eval()
        with torch.no_grad():
            logits = torch.cat([net(x)["logits"] for x in inputs[t]["test"]["x"].split(48)])
        out["points"][f"task {t + 1}"] = {
            "params": out.pop("params"),
            "loss": losses[-1],
            "logits": logits,
        }
    torch.save(out, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
