"""Drive the authors' TUNA (``models/tuna.py`` and ``backbone/vit_tuna.py`` of github
Ngahoang2005/ICCV2025-TUNA at commit 8e1c3ec) in a scratch copy patched by
bench/parity/methods/tuna/row.py, for that parity row. Runs with the reference's interpreter
in the copy's root (its modules are imported from there); the authors' learner does
every step, this script only builds its backbone at ViT-Tiny size, feeds it and reads
it out (the upload has no trainer.py, so the task loop is this script's):

    cd COPY && PARITY_TREE=... PARITY_WEIGHTS=... PARITY_IMG_SIZE=... \\
        python .../methods/tuna/reference.py SPEC.json OUT.pt

SPEC (JSON): ``args``, the authors' exps/tuna_imgr.json with the row's settings and
seed; ``order``, the class order; ``merged``, whether the combination reads the
merged adapter (``adapter_id = cur_task + 2``) instead of what the authors' code
reads (``cur_task + 1``, the live adapter); ``step``, ``{"init": FILE, "perm": FILE,
"seed": int, "tasks": int}``: the step check for ``tasks`` tasks (the row's paired
seeds run it for all three).

Backbone: the authors' ``VisionTransformer`` with ViT-Tiny numbers (embed 192, 3
heads, 12 blocks) at ``PARITY_IMG_SIZE``, its adapters 192 wide, loaded from
``PARITY_WEIGHTS`` (cl-bench's random ViT-Tiny) with ``qkv`` split into q, k, v and
``mlp.fc*`` renamed, as the authors' builder does for ViT-B; only the adapters, the
(unused) head and the fc are left at their init.

Step check: the training transform is the test transform, no loader shuffles, the
training images of task t come in the order ``perm[t]``, the global generator is seeded
with ``seed + k`` before the k-th training forward (so the adapters' dropout masks are
cl-bench's) and with ``seed`` before the classifier alignment (the same Gaussian draws
and permutations), and at the start of task t the tensors of ``init[t]`` (task 0: the
adapters and the first fc block; later: the new fc block) overwrite the learner's. OUT
holds, after the first optimizer step and after each task: the trainable tensors (the
live adapters, every fc block, the stored adapters' up-projections), the loss of the
last step, the test outputs that ``_eval_cnn`` ranks, and the labels and pixel sums
of every training batch. The feeding and the read-out are
bench/parity/drivers/pilot_adapters.py's (``step_check``,
``evaluate``), given TUNA's tensors, its backbone as the hooked module and the
outputs ``_eval_cnn`` ranks last per batch.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.getcwd())
# the shared driver of the adapter rows, bench/parity/drivers/pilot_adapters.py
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "drivers"))
torch.set_num_threads(1)

import pilot_adapters  # noqa: E402
from backbone import vit_tuna  # noqa: E402
from models import tuna as tuna_module  # noqa: E402
from utils import inc_net  # noqa: E402
from utils.data import iParity  # noqa: E402
from utils.data_manager import DataManager  # noqa: E402

DIM, HEADS = 192, 3


def tiny_backbone(args, pretrained=False):
    """The authors' adapter ViT at ViT-Tiny size with the parity weights."""
    config = SimpleNamespace(
        ffn_adapt=True, ffn_option="parallel", d_model=DIM, _device=args["device"][0]
    )
    model = vit_tuna.VisionTransformer(
        img_size=int(os.environ["PARITY_IMG_SIZE"]),
        patch_size=16,
        embed_dim=DIM,
        depth=12,
        num_heads=HEADS,
        mlp_ratio=4,
        qkv_bias=True,
        norm_layer=partial(nn.LayerNorm, eps=1e-6),
        num_classes=0,
        global_pool=False,
        drop_path_rate=0.0,
        tuning_config=config,
        r=args["r"],
    )
    state = torch.load(os.environ["PARITY_WEIGHTS"], map_location="cpu", weights_only=True)
    for key in list(state):
        if "qkv." in key:
            q, k, v = state.pop(key).split(DIM)
            for name, part in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
                state[key.replace("qkv", name)] = part
    for key in list(state):
        if "mlp.fc" in key:
            state[key.replace("mlp.", "")] = state.pop(key)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("adapter" in k or k.startswith("head") for k in missing), missing
    for name, p in model.named_parameters():
        p.requires_grad = "head" in name or "adapter" in name
    return model


def loader(real):
    def make(dataset, batch_size, shuffle=False, num_workers=0, **kwargs):
        return real(dataset, batch_size=batch_size, shuffle=False, num_workers=0)

    return make


def trainable(learner) -> dict[str, torch.Tensor]:
    """The live adapters, every fc block and the stored adapters' up-projections,
    under the row's names."""
    backbone, out = learner._network.backbone, {}
    for i, adapter in enumerate(backbone.cur_adapter):
        for ours, theirs in (("down", adapter.down_proj), ("up", adapter.up_proj)):
            out[f"adapter.{i}.{ours}.weight"] = theirs.weight.detach().clone()
            out[f"adapter.{i}.{ours}.bias"] = theirs.bias.detach().clone()
    for k, head in enumerate(learner._network.fc.heads):
        out[f"head.{k}"] = head[0].weight.detach().clone()
    for k, stored in enumerate(backbone.adapter_list):
        if k < learner._cur_task:
            for i, adapter in enumerate(stored):
                out[f"old.{k}.{i}.up.weight"] = adapter.up_proj.weight.detach().clone()
    return out


@torch.no_grad()
def load_init(learner, tensors: dict[str, torch.Tensor]) -> None:
    backbone = learner._network.backbone
    for i, adapter in enumerate(backbone.cur_adapter):
        for ours, theirs in (("down", adapter.down_proj), ("up", adapter.up_proj)):
            if f"adapter.{i}.{ours}.weight" in tensors:
                theirs.weight.copy_(tensors[f"adapter.{i}.{ours}.weight"])
                theirs.bias.copy_(tensors[f"adapter.{i}.{ours}.bias"])
    for k, head in enumerate(learner._network.fc.heads):
        if f"head.{k}" in tensors:
            head[0].weight.copy_(tensors[f"head.{k}"])


def evaluate(learner) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """``_eval_cnn``'s ranked outputs: after the first task one ``topk`` call per batch,
    later one per adapter pass and the combination last (``cur_task + 2`` per batch)."""
    per_batch = 1 if learner._cur_task == 0 else learner._cur_task + 2
    return pilot_adapters.evaluate(learner, per_batch)


def step_check(learner, data_manager, step: dict) -> dict:
    """pilot_adapters.py's step check on TUNA's tensors (module docstring)."""
    return pilot_adapters.step_check(
        learner, data_manager, step, trainable, load_init, learner._network.backbone, evaluate
    )


def read_merged(learner) -> None:
    """The combination reads the merged adapter: ``_eval_cnn``'s universal pass asks
    for adapter ``cur_task + 2`` (past the stored list) instead of ``cur_task + 1``."""
    backbone, real = learner._network.backbone, learner._network.backbone.forward

    def forward(x, adapter_id=-1, train=False, fc_only=False):
        if not train and adapter_id == len(backbone.adapter_list) and learner._cur_task > 0:
            adapter_id += 1
        return real(x, adapter_id=adapter_id, train=train, fc_only=fc_only)

    backbone.forward = forward


def main(spec_path: str, out_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    args, step = spec["args"], spec["step"]
    iParity.class_order = spec["order"]
    iParity.train_trsf = iParity.test_trsf
    torch.manual_seed(args["seed"])
    np.random.seed(args["seed"])
    args["device"] = [torch.device("cpu")]
    data_manager = DataManager(
        args["dataset"], args["shuffle"], args["seed"], args["init_cls"], args["increment"], args
    )
    args["nb_classes"], args["nb_tasks"] = data_manager.nb_classes, data_manager.nb_tasks
    inc_net.get_backbone = tiny_backbone
    tuna_module.num_workers = 0
    tuna_module.DataLoader = loader(tuna_module.DataLoader)
    learner = tuna_module.Learner(args)
    learner.topk = 1
    learner._network.backbone.out_dim = DIM
    if spec.get("merged"):
        read_merged(learner)
    torch.save(step_check(learner, data_manager, step), out_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
