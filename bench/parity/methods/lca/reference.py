"""Drive the authors' LCA code (a copy of github tungts1101/LCA at 3e6670b, unpatched)
for the parity row bench/parity/methods/lca/row.py. Runs with cl-bench's interpreter
(its timm 1.0.31 still answers the official ``timm.models.layers`` and
``timm.models.registry`` imports) and imports nothing of cl-bench.

    python bench/parity/methods/lca/reference.py SPEC.json OUT.pt

SPEC: ``copy`` (the copy), ``config`` (the official config's keys), ``inputs`` (a
``torch.save`` file: per task ``train`` {x, y} normalised images in dataset order,
``perm`` the training batch order, ``test`` {x, y} the seen classes' test images),
``init`` (per task the tensors exported from cl-bench, in cl-bench's names), ``seed``,
``tasks``, ``size`` (the image size), ``weights`` (the ViT's state dict file).

The official ``Learner`` (``lca.py``) runs its own ``before_task``, ``train`` (training,
the class statistics, the TIES merge through its checkpoint files, the local
alignment) and ``after_task`` for every task, with these stand-ins, all set up here
without editing the copy:

* ``helper.get_backbone``: the official adapter ViT (``backbone/vit_adapter.py``
  ``VisionTransformer`` with its ``Adapter``, the config of ``get_backbone``'s adapter
  branch) at ViT-Tiny size (width 192, 3 heads, ``size`` px), loaded from ``weights``
  with ``qkv`` split into ``q_proj``/``k_proj``/``v_proj`` and ``mlp.fc*`` renamed, as
  the official ``vit_base_patch16_224_adapter`` loads timm's ViT-B; only adapter
  tensors trainable, as there;
* ``.cuda()`` of tensors and modules returns them on the CPU;
* the modules ``peft`` and ``easydict`` (not installed; only the LoRA branch uses
  peft) and ``utils.data_manager`` (its datasets are replaced by :class:`Tasks`);
* ``lca.DataLoader``: the training loader reads the task's images in the order
  ``perm`` every epoch (official: shuffled), every other loader in dataset order;
* the generator seeded with ``seed + k`` before the k-th training forward (the
  adapters' dropout masks) and with ``seed`` before each alignment (the Gaussian draws
  and the shuffles);
* cl-bench's tensors copied in once a task's head exists (task 0: the adapters too,
  and the base checkpoint written again from them, as the official ``__init__`` writes
  it from its own).

OUT: after the first optimizer step and after each task, every trainable tensor (the
adapters and every head) in cl-bench's names, the loss of the last training step,
the test logits over the seen classes, and the label of every training image in batch
order.
"""

from __future__ import annotations

import json
import os
import sys
import types
from functools import partial

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

DIM, HEADS, DEPTH = 192, 3, 12


def stand_in(name: str, **attrs) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


class AttrDict(dict):
    """``easydict.EasyDict``'s attribute access, enough for ``get_backbone``'s config."""

    __getattr__ = dict.__getitem__


def ours_name(name: str) -> str | None:
    """The official name of a trainable tensor -> cl-bench's (None: not compared)."""
    p = name.split(".")
    if p[0] == "backbone" and len(p) == 6 and p[3] == "adaptmlp":
        part = {"down_proj": "down", "up_proj": "up"}[p[4]]
        return f"adapter.{p[2]}.{part}.{p[5]}"
    if p[0] == "classifier":
        return f"head.{p[2]}"
    return None


def ref_name(name: str) -> str:
    p = name.split(".")
    if p[0] == "adapter":
        part = {"down": "down_proj", "up": "up_proj"}[p[2]]
        return f"backbone.blocks.{p[1]}.adaptmlp.{part}.{p[3]}"
    return f"classifier.heads.{p[1]}.0.weight"


def tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters and every head (trainable or not: the alignment trains them all)."""
    out = {}
    for name, value in model.named_parameters():
        ours = ours_name(name)
        if ours is not None:
            out[ours] = value.detach().clone()
    return out


def build_backbone(size: int, weights: str):
    """The official adapter ViT at ViT-Tiny size (module docstring)."""
    from backbone import vit_adapter

    config = AttrDict(
        ffn_adapt=True,
        ffn_option="parallel",
        ffn_adapter_layernorm_option="none",
        ffn_adapter_init_option="lora",
        ffn_adapter_scalar="0.1",
        ffn_num=16,
        d_model=DIM,
        vpt_on=False,
        vpt_num=0,
    )
    model = vit_adapter.VisionTransformer(
        img_size=size,
        patch_size=16,
        embed_dim=DIM,
        depth=DEPTH,
        num_heads=HEADS,
        mlp_ratio=4,
        qkv_bias=True,
        norm_layer=partial(nn.LayerNorm, eps=1e-6),
        num_classes=0,
        global_pool=False,
        drop_path_rate=0.0,
        tuning_config=config,
    )
    state = torch.load(weights)
    for key in list(state):
        if "qkv." in key:
            full = state.pop(key)
            for k, part in enumerate(("q_proj", "k_proj", "v_proj")):
                state[key.replace("qkv", part)] = full[k * DIM : (k + 1) * DIM]
        elif "mlp.fc" in key:
            state[key.replace("mlp.", "")] = state.pop(key)
    state = {k: v for k, v in state.items() if not k.startswith("head")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any("adaptmlp" not in k for k in missing):
        raise SystemExit(f"weights do not fit the adapter ViT: {missing} {unexpected}")
    for name, param in model.named_parameters():
        param.requires_grad = "adapt" in name.lower()
    model.out_dim = DIM
    return model.eval()


class Images(Dataset):
    """(index, index, image, label) as the official datasets give them."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor | None = None):
        self.x, self.y, self.perm = x, y, perm

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return i, i, self.x[i], int(self.y[i])


class Tasks:
    """What the official ``Learner`` asks of its ``DataManager``."""

    def __init__(self, inputs: list[dict]) -> None:
        self.inputs = inputs

    def get_task_size(self, task: int) -> int:
        return len(self.inputs[task]["train"]["y"].unique())

    def get_dataset(self, classes, source: str, mode: str) -> Images:
        wanted = torch.as_tensor(classes)
        if source == "test":
            part = self.inputs[-1]["test"]
            keep = torch.isin(part["y"], wanted)
            return Images(part["x"][keep], part["y"][keep])
        for task in self.inputs:
            part = task["train"]
            if torch.isin(part["y"], wanted).all() and mode == "train":
                return Images(part["x"], part["y"], task["perm"])
            keep = torch.isin(part["y"], wanted)
            if keep.any() and mode == "test":
                return Images(part["x"][keep], part["y"][keep])
        raise KeyError(f"no images of classes {classes.tolist()}")


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    torch.set_num_threads(1)
    os.chdir(os.path.dirname(os.path.abspath(out_path)))
    run_dir = f"{os.path.basename(out_path)}.run"
    os.makedirs(run_dir, exist_ok=True)
    os.chdir(run_dir)  # the official checkpoints/ and logs/ folders go here
    sys.path.insert(0, spec["copy"])
    stand_in("peft", get_peft_model=None, LoraConfig=None)
    stand_in("easydict", EasyDict=AttrDict)
    stand_in("utils.data_manager", DataManager=None)
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.cuda = lambda self, *a, **k: self
    import helper
    import lca

    helper.get_backbone = lambda config: build_backbone(spec["size"], spec["weights"])
    inputs, init = torch.load(spec["inputs"]), torch.load(spec["init"])
    seed = spec["seed"]
    out: dict = {"points": {}, "batch_labels": []}
    state = {"forwards": 0, "phase": "train", "loss": None}

    def loader(dataset, batch_size, shuffle=False, num_workers=0):
        if shuffle:
            out["batch_labels"].append(dataset.y[dataset.perm])
            return DataLoader(dataset, batch_size=batch_size, sampler=dataset.perm.tolist())
        return DataLoader(dataset, batch_size=batch_size, shuffle=False)

    get_features = helper.Model.get_features

    def seeded_features(self, x, *args, **kwargs):
        if self.training:
            torch.manual_seed(seed + state["forwards"])
            state["forwards"] += 1
        return get_features(self, x, *args, **kwargs)

    cross_entropy = torch.nn.functional.cross_entropy

    def recorded_ce(*args, **kwargs):
        loss = cross_entropy(*args, **kwargs)
        if state["phase"] == "train":
            state["loss"] = float(loss)
        return loss

    functional = types.ModuleType("F")
    functional.__dict__.update(torch.nn.functional.__dict__)
    functional.cross_entropy = recorded_ce

    class SGD(torch.optim.SGD):
        def step(self, *args, **kwargs):
            done = super().step(*args, **kwargs)
            if state["phase"] == "train" and "step 1" not in out["points"]:
                out["points"]["step 1"] = {"params": trainable(), "loss": state["loss"]}
            return done

    optim = types.ModuleType("optim")
    optim.__dict__.update(torch.optim.__dict__)
    optim.SGD = SGD

    update_classifier = helper.Model.update_classifier

    def exported_classifier(self, *args, **kwargs):
        update_classifier(self, *args, **kwargs)
        task = learner._cur_task
        with torch.no_grad():
            named = dict(self.named_parameters())
            for name, value in init[str(task)].items():
                named[ref_name(name)].copy_(value)
        if task == 0:
            torch.save(self.get_backbone_trainable_params(), learner.backbone_checkpoint())

    align = lca.Learner.align

    def seeded_align(self, classifier):
        state["phase"] = "align"
        torch.manual_seed(seed)
        align(self, classifier)
        state["phase"] = "train"

    def trainable() -> dict[str, torch.Tensor]:
        return tensors(learner.model)

    lca.DataLoader = loader
    lca.F = functional
    lca.optim = optim
    helper.Model.get_features = seeded_features
    helper.Model.update_classifier = exported_classifier
    lca.Learner.align = seeded_align
    learner = lca.Learner(spec["config"])
    tasks = Tasks(inputs)
    learner.data_manager = tasks
    for t in range(spec["tasks"]):
        learner.data_manager = Tasks(inputs[: t + 1])
        learner.before_task(t, learner.data_manager)
        learner.train()
        net = learner.model.eval()
        with torch.no_grad():
            logits = torch.cat([net(x) for x in inputs[t]["test"]["x"].split(48)])
        out["points"][f"task {t + 1}"] = {
            "params": tensors(net),
            "loss": state["loss"],
            "logits": logits,
        }
        learner.after_task()
    torch.save(out, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
