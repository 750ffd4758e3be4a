"""Drive the authors' CaRE (``models/care.py`` and ``backbone/vit_brmoe.py`` of github
LMMMEng/CaRE at commit d90800a) in a scratch copy patched by
bench/parity/methods/care/row.py, for that parity row. Runs with the reference's
interpreter in the copy's root (its modules are imported from there); the authors'
learner does every step, this script only builds its backbone at ViT-Tiny size, feeds
it and reads it out:

    cd COPY && PARITY_TREE=... PARITY_WEIGHTS=... PARITY_IMG_SIZE=... \\
        python .../methods/care/reference.py SPEC.json OUT.pt

SPEC (JSON): ``args``, the authors' exps/imagenet_a/care_ina_inc20.json with the row's
settings and seed; ``order``, the class order; ``step``, ``{"init": FILE, "perm": FILE,
"seed": int, "tasks": int}`` (bench/parity/drivers/pilot_adapters.py's step check).

Backbone: the authors' ``VisionTransformer`` with ViT-Tiny numbers (embed 192, 3 heads,
12 blocks) at ``PARITY_IMG_SIZE``, its BR-MoE 192 wide, loaded from ``PARITY_WEIGHTS``
with ``qkv`` split into q, k, v and ``mlp.fc*`` renamed, as the authors' builder does
for ViT-B. The authors' tuning config is an ``EasyDict`` and their BR-MoE imports
``einops`` for one ``einsum``; neither package is in the reference's environment, so
this script puts a dict with attribute access and a stand-in ``einops`` module
(``einsum`` through ``torch.einsum`` on the same one-letter pattern) in their place
before importing the authors' modules.

Tensors: at the start of task t the tensors cl-bench exported (task 0: every block's
shared adapter, the first expert, router and perceptor, the first fc block; later: the
task's expert, router, perceptor and fc block) overwrite the learner's, the new expert,
router and perceptor right after the authors' ``update_adapters`` made them. Recorded:
every block's shared adapter and the current task's expert, router and perceptor, and
every fc block, under the row's names.
"""

from __future__ import annotations

import json
import os
import sys
import types
from functools import partial

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "drivers"))
torch.set_num_threads(1)


def _einsum(*args):
    *tensors, pattern = args
    return torch.einsum(pattern.replace(" ", ""), *tensors)


sys.modules["einops"] = types.SimpleNamespace(einsum=_einsum, rearrange=None)

import pilot_adapters  # noqa: E402
from backbone import vit_brmoe  # noqa: E402
from models import care as care_module  # noqa: E402
from utils import inc_net  # noqa: E402
from utils.data import iParity  # noqa: E402
from utils.data_manager import DataManager  # noqa: E402

DIM, HEADS = 192, 3
PARTS = {"down": "down_proj", "up": "up_proj", "norm": "adapter_layer_norm_before"}


class Config(dict):
    """The authors' EasyDict: keys as attributes."""

    __getattr__ = dict.__getitem__


def tiny_backbone(args, pretrained=False):
    """The authors' BR-MoE ViT at ViT-Tiny size with the parity weights."""
    config = Config(
        ffn_adapt=True,
        ffn_option="parallel",
        d_model=DIM,
        _device=args["device"][0],
        expert_dim=args.get("expert_dim", 16),
        adapter_dim=args.get("adapter_dim", 64),
        topk_routers=args.get("topk_routers", 2),
        topk_experts=args.get("topk_experts", 3),
        init_cls=args["init_cls"],
    )
    model = vit_brmoe.VisionTransformer(
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
    assert all("adapter" in k for k in missing), missing
    for name, p in model.named_parameters():
        p.requires_grad = "head" in name or "adapter" in name
    return model


def adapter_tensors(prefix: str, adapter) -> dict[str, torch.Tensor]:
    out = {f"{prefix}.scale": adapter.scale.detach().clone()}
    for ours, theirs in PARTS.items():
        layer = getattr(adapter, theirs)
        out[f"{prefix}.{ours}.weight"] = layer.weight.detach().clone()
        out[f"{prefix}.{ours}.bias"] = layer.bias.detach().clone()
    return out


def layers(learner):
    backbone = learner._network.backbone
    return [(i, backbone.adapter[f"adapter_layer{i}"]) for i in backbone.adapter_idx]


def trainable(learner) -> dict[str, torch.Tensor]:
    """Every block's shared adapter and current expert, router and perceptor, and every
    fc block, under the row's names."""
    out, task = {}, max(learner._cur_task, 0)
    for i, moe in layers(learner):
        out.update(adapter_tensors(f"shared.{i}", moe.shared_adapter))
        out.update(adapter_tensors(f"expert.{i}", moe.adapter[task]))
        for name, t in moe.router[task].state_dict().items():
            out[f"router.{i}.{name}"] = t.detach().clone()
        for name, t in moe.latent_head[task].state_dict().items():
            out[f"perceptor.{i}.{name}"] = t.detach().clone()
    for k, head in enumerate(learner._network.fc.heads):
        out[f"head.{k}"] = head[0].weight.detach().clone()
    return out


@torch.no_grad()
def copy_adapter(adapter, prefix: str, tensors: dict[str, torch.Tensor]) -> None:
    adapter.scale.copy_(tensors[f"{prefix}.scale"])
    for ours, theirs in PARTS.items():
        layer = getattr(adapter, theirs)
        layer.weight.copy_(tensors[f"{prefix}.{ours}.weight"])
        layer.bias.copy_(tensors[f"{prefix}.{ours}.bias"])


@torch.no_grad()
def load_modules(learner, tensors: dict[str, torch.Tensor]) -> None:
    """The exported tensors the learner holds now (the newest expert, router and
    perceptor of each block, its shared adapter at task 0, the fc blocks)."""
    for i, moe in layers(learner):
        task = len(moe.adapter) - 1
        if f"expert.{i}.scale" in tensors:
            copy_adapter(moe.adapter[task], f"expert.{i}", tensors)
            for module, prefix in (
                (moe.router[task], "router"),
                (moe.latent_head[task], "perceptor"),
            ):
                module.load_state_dict(
                    {n: tensors[f"{prefix}.{i}.{n}"] for n in module.state_dict()}
                )
        if f"shared.{i}.scale" in tensors:
            copy_adapter(moe.shared_adapter, f"shared.{i}", tensors)
    for k, head in enumerate(learner._network.fc.heads):
        if f"head.{k}" in tensors:
            head[0].weight.copy_(tensors[f"head.{k}"])


def load_init(learner, tensors: dict[str, torch.Tensor]) -> None:
    """At task 0 everything exists; later the fc block exists at once, and the new
    expert, router and perceptor once ``update_adapters`` inside ``_train`` made them."""
    if learner._cur_task == 0:
        load_modules(learner, tensors)
        return
    load_modules(learner, {k: v for k, v in tensors.items() if k.startswith("head.")})
    backbone = learner._network.backbone
    real = backbone.update_adapters

    def update_adapters(*args, **kwargs):
        real(*args, **kwargs)
        load_modules(learner, tensors)
        del backbone.update_adapters

    backbone.update_adapters = update_adapters


def evaluate(learner) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """``_eval_cnn``'s ranked outputs: after the first task one ``topk`` call per batch,
    later one per forced pass and the combination last (``cur_task + 2`` per batch)."""
    per_batch = 1 if learner._cur_task == 0 else learner._cur_task + 2
    return pilot_adapters.evaluate(learner, per_batch)


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
    care_module.num_workers = 0
    learner = care_module.Learner(args)
    learner.topk = 1
    learner._network.backbone.out_dim = DIM
    result = pilot_adapters.step_check(
        learner, data_manager, step, trainable, load_init, learner._network.backbone, evaluate
    )
    torch.save(result, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
