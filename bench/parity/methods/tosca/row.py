"""TOSCA beside its official code (github ladka6/tosca-eval at its root commit, the
public copy of muratonuryildirim/tosca): ``models/tosca.py`` ``Learner`` driven by
bench/parity/methods/tosca/reference.py on a copy patched by bench/parity/methods/tosca/patch.py.

The official code calls ``VisionTransformer.pool`` (timm >= 1.0; its README installs
timm unpinned), which bench/.venv-avalanche's timm 0.6.13 lacks, so it runs with
cl-bench's interpreter (timm 1.0.31, torch 2.14.1) and imports nothing of cl-bench.

Setting: the parity tree (make_tree.py, 40 train / 30 test Fashion-MNIST images per
class), cl-bench's random ViT-Tiny at 64 px (export_weights.py), 2 tasks of 5
classes in one fixed order, the official hyper-parameters (exps/*.json: SGD,
momentum 0.9, cosine schedule, batch 48, l1 5e-4, ratios 16) but 5 epochs at lr 0.1
(official: 20 at 0.025; the same accuracies here at a quarter of the backbone passes),
the official test protocol on both sides (cl-bench: ``--protocol paper``, i.e.
batch-mean entropy selection over class-ordered test batches of 48). On the random
ViT, pairs of Fashion-MNIST classes (5 tasks of 2) are not all learnt: coat/pullover
stays near 55 % and the batch entropy picks the wrong module for whole tasks; 2 tasks
of 5 are learnt on both sides (about 48 % and 72 % right after training, chance 20 %).

Paired seeds: the step check's machinery with the seed's randomness shared. cl-bench's
strategy draws its initial tensors after ``seed_everything(seed)`` as a run does;
they go into the official code, and both sides train on one batch order drawn from
the seed, without augmentation (cl-bench's default ``augment_views: 0``; the official
code given its test transform), the official code on its own fp32 features.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from bench.parity.methods import ParityError

METHOD = "tosca"
REFERENCE = {
    "repo": "ladka6/tosca-eval",
    "commit": "176f123a5bc8f38429824d5a4bb1a04c0dcd25f6",
    "what": "models/tosca.py Learner (trainer.py _train)",
}
PAIRING = "paired"
PAIRING_WHY = (
    "one seed fixes the same randomness on both sides: the initial LuCA module and "
    "classifier rows are cl-bench's draws after seed_everything(seed) (as a run draws "
    "them), exported into the official code, and both sides see the batches of one "
    "order drawn from the seed, with no augmentation. Left to themselves the two sides "
    "share nothing random (the official code draws its tensors after timm's ViT init "
    "and shuffles with its own DataLoader and crops; cl-bench uses Avalanche's loader "
    "and cached views): see notes for those runs."
)
CLASS_ORDER = [4, 2, 7, 6, 0, 3, 5, 8, 9, 1]  # PILOT's permutation of seed 1993
SEEDS = list(range(1993, 2003))
IMAGES = (40, 30)  # train / test images per class
SIZE = 64
TASKS = (5, 5)  # init_cls, increment: two tasks of 5 classes
HYPER = {"epochs": 5, "lr": 0.1, "batch_size": 48, "l1": 0.0005, "mlp_ratio": 16, "se_ratio": 16}
SETTING = {
    "tree": f"bench/parity/make_tree.py, {IMAGES[0]} train / {IMAGES[1]} test "
    "images per class, 10 classes",
    "backbone": "vit_tiny_patch16_224",
    "weights": "export_weights.py (cl-bench's --weights random, seeded)",
    "image_size": SIZE,
    "tasks": f"{TASKS[0]} + {TASKS[1]} classes",
    **HYPER,
    "optimizer": "sgd",
    "momentum": 0.9,
    "scheduler": "cosine",
    "flow": "tosca",
    "ours": "cl-bench's Tosca strategy (bench/parity/methods/tosca/ours.py) with "
    "the paper protocol's selection batch, test_shuffle false, init "
    "official, augment_views 0; fp32, CPU",
    "reference": "trainer.train, the official code given cl-bench's initial "
    "tensors, the seed's batch order and its test transform for "
    "training (bench/parity/methods/tosca/reference.py)",
    "shared": "initial tensors and batch order from the seed; no augmentation",
}
NOTES = [
    "per_seed.*.new_task: top-1 on the newest task's test images right after training on "
    "it (predicted among all seen classes); chance is 20 % (5 classes) within the task",
    "5 tasks of 2 classes were tried first: on the random ViT-Tiny coat/pullover stays "
    "near 55 % and the batch-mean entropy picks another task's module for whole tasks "
    "(0 % right after training) on both sides, so that split does not learn every task",
    "the official code runs with cl-bench's interpreter (timm 1.0.31): it calls "
    "VisionTransformer.pool, absent from bench/.venv-avalanche's timm 0.6.13",
    "unpaired runs (this row at commit 5510fac, same tree, order, split and "
    "hyper-parameters, seeds 1993-2002): cl-bench run --protocol paper with 5 cached "
    "views against the official code as published (its own draws, per-epoch crops): "
    "avg 48.73 vs 48.98 (ours - reference -0.25, Welch 95 % [-1.87, +1.37]), last 44.60 "
    "vs 44.63 (-0.03, [-3.25, +3.18]); the last point is bimodal on both sides (about "
    "42 or 47 %: the batch-mean entropy switches modules for whole test batches), "
    "hence the wide interval; every task learnt on both sides (task 1 46-51 %, task 2 "
    "69-73 % right after training)",
]
REF_PYTHON = Path(sys.executable)
DRIVER = Path(__file__).resolve().parent / "reference.py"
BOUND = 1e-5
BOUND_WHY = (
    "float32 round-off: both sides run the same torch kernels on the same inputs "
    "but sum in different orders (the L1 term over the parameters in another "
    "order, cl-bench's one batched call over all modules at test time), a few "
    "float32 ulps on values up to about 3 (ulp 2.4e-7 at 2), carried through the "
    "25 SGD steps of a task; 1e-5 is about 40 ulps there, while the smallest "
    "genuine difference known, the fp16 storage of the feature, moves the "
    "parameters by 1e-4 after task 1 and 2e-3 after task 2"
)


def inputs(work: Path) -> tuple[Path, Path]:
    """The parity tree and the 64 px weights under ``work`` (made once)."""
    from bench.parity.export_weights import export
    from bench.parity.make_tree import write_tree

    tree, weights = work / "tree", work / f"vit_tiny_random_{SIZE}.pth"
    if not (tree / "test").is_dir():
        write_tree(tree, *IMAGES)
    if not weights.is_file():
        export(weights, SIZE)
    return tree, weights


def prepare(copy: Path) -> None:
    from bench.parity.methods.tosca.patch import patch

    try:
        patch(copy)
    except SystemExit as e:
        raise ParityError(str(e)) from None


def reference(copy: Path, work: Path, spec: dict, fp16: bool) -> dict:
    """Run the driver on ``spec``; its output file's contents."""
    tree, weights = inputs(work)
    name = f"{spec['mode']}-{spec.get('seed', 0)}{'-fp16' if fp16 else ''}"
    spec_path, out = work / f"ref-{name}.json", work / f"ref-{name}.pt"
    spec = {
        **spec,
        "copy": str(copy),
        "work": str(work / "ref"),
        "class_order": CLASS_ORDER,
        "config": {
            "prefix": "parity",
            "init_cls": TASKS[0],
            "increment": TASKS[1],
            "pretrained": True,
            "flow": "tosca",
            "optimizer": "sgd",
            "scheduler": "cosine",
            "weight_decay": 0,
            **HYPER,
        },
    }
    spec_path.write_text(json.dumps(spec))
    env = {
        **os.environ,
        "PARITY_TREE": str(tree),
        "PARITY_WEIGHTS": str(weights),
        "PARITY_IMG_SIZE": str(SIZE),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(copy),
    }
    env.pop("PARITY_FP16_FEATURES", None)
    if fp16:
        env["PARITY_FP16_FEATURES"] = "1"
    with open(work / f"ref-{name}.log", "w") as log:
        done = subprocess.run(
            ["nice", "-n", "10", str(REF_PYTHON), str(DRIVER), str(spec_path), str(out)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if done.returncode:
        raise ParityError(
            f"the official TOSCA code failed (exit {done.returncode}); see "
            f"{work / f'ref-{name}.log'}"
        )
    return torch.load(out)


def batch_orders(tree: Path, order: list[int], seed: int = 0) -> list[list[list[str]]]:
    """``[task][epoch]`` -> the image paths (relative to ``tree``) in batch order: a
    permutation per epoch drawn from ``seed``, shared by both sides."""
    classes = sorted(p.name for p in (tree / "train").iterdir())
    gen = torch.Generator().manual_seed(seed)
    orders = []
    for t in range(2):
        first = TASKS[0] + TASKS[1] * (t - 1) if t else 0
        names = [classes[c] for c in order[first : first + TASKS[t > 0]]]
        paths = [
            f"train/{c}/{f.name}" for c in names for f in sorted((tree / "train" / c).iterdir())
        ]
        orders.append(
            [
                [paths[i] for i in torch.randperm(len(paths), generator=gen).tolist()]
                for _ in range(HYPER["epochs"])
            ]
        )
    return orders


def gaps(ours: dict, ref: dict) -> dict[str, list[float]]:
    """Largest absolute difference of the parameters, losses and logits at each point."""
    out: dict[str, list[float]] = {"max_abs_param": [], "max_abs_loss": [], "max_abs_logit": []}
    for point in ("step 1", "task 1", "task 2"):
        a, b = ours[point], ref[point]
        if set(a["params"]) != set(b["params"]):
            raise ParityError(
                f"{point}: trainable tensors differ in name: "
                f"{sorted(set(a['params']) ^ set(b['params']))}"
            )
        out["max_abs_param"].append(
            max(float((a["params"][k] - b["params"][k]).abs().max()) for k in a["params"])
        )
        out["max_abs_loss"].append(
            float((torch.tensor(a["loss"]) - torch.tensor(b["loss"])).abs().max())
        )
        out["max_abs_logit"].append(float((a["logits"] - b["logits"]).abs().max()))
    return out


def shared_run(work: Path, seed: int) -> tuple[dict, dict]:
    """cl-bench's side on the seed's batch order and initial tensors, and the driver's
    spec that gives the official code the same."""
    from bench.parity.methods.tosca import ours as tosca_ours

    torch.set_num_threads(1)
    tree, weights = inputs(work)
    os.environ["CL_BENCH_CACHE"] = str(work / "feature-cache")
    orders = batch_orders(tree, CLASS_ORDER, seed)
    settings = {k: HYPER[k] for k in ("epochs", "lr", "batch_size", "l1")}
    ours, init = tosca_ours.run(
        tree, weights, SIZE, CLASS_ORDER, list(TASKS), settings, orders, seed
    )
    torch.save(init, work / f"init-{seed}.pt")
    return ours, {
        "mode": "step",
        "seed": seed,
        "orders": orders,
        "init": str(work / f"init-{seed}.pt"),
    }


def step(copy: Path, work: Path) -> dict:
    ours, spec = shared_run(work, 0)
    exact = gaps(ours, reference(copy, work, spec, fp16=True))
    plain = gaps(ours, reference(copy, work, spec, fp16=False))
    kept = [
        (
            "cl-bench's feature store keeps every frozen feature in fp16 "
            "(cl_bench/engine/features.py), the official code feeds the fp32 [CLS] feature "
            "to the LuCA module: the numbers above round the official feature through fp16 "
            "too (PARITY_FP16_FEATURES=1); without it the largest differences are "
            f"{fmt(plain['max_abs_param'])} (parameters), {fmt(plain['max_abs_loss'])} "
            f"(losses), {fmt(plain['max_abs_logit'])} (logits) after step 1 / task 1 / "
            "task 2. No card switch: a suite-wide storage choice"
        )
    ]
    return {
        "after": ["step 1", "task 1", "task 2"],
        **exact,
        "bound": BOUND,
        "bound_why": BOUND_WHY,
        "kept": kept,
    }


def fmt(values: list[float]) -> str:
    return " / ".join(f"{v:.1e}" for v in values)


def curve(run: dict) -> list[float]:
    """Top-1 over the seen classes after each task, in percent, from the selected
    test logits."""
    return [
        100.0 * float((run[p]["logits"].argmax(1) == run[p]["labels"]).float().mean())
        for p in ("task 1", "task 2")
    ]


def new_task(run: dict) -> list[float]:
    """Top-1 on the newest task's test images right after training on it."""
    out = []
    for t, p in enumerate(("task 1", "task 2")):
        new = run[p]["labels"] >= (TASKS[0] if t else 0)
        hit = run[p]["logits"].argmax(1) == run[p]["labels"]
        out.append(100.0 * float(hit[new].float().mean()))
    return out


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    ours, spec = shared_run(work, seed)
    ref = reference(copy, work, spec, fp16=False)
    if not torch.equal(ours["task 2"]["labels"], ref["task 2"]["labels"].long()):
        raise ParityError("the two sides' test sets are not in the same order")
    return {
        side: {"curve": curve(run), "new_task": new_task(run)}
        for side, run in (("ours", ours), ("reference", ref))
    }
