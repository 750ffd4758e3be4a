"""Parity row of LCA (cl_bench/strategies/lca.py) against the authors' code (github
tungts1101/LCA at 3e6670b: ``lca.py`` ``Learner``, ``helper.py`` ``Model`` and ``merge``,
``backbone/vit_adapter.py``), driven by bench/parity/methods/lca/reference.py with
cl-bench's interpreter (the authors' requirements pin timm 0.6.12; the adapter path
they run imports nothing that timm 1.0.31 lacks). The copy is not patched: the
driver's stand-ins (its docstring) give the code a ViT-Tiny, the CPU and the images.

Setting: bench/parity/adapter_rows.py's (six Fashion-MNIST classes of the parity tree
in three tasks of two, one fixed class order, the ``--weights random`` ViT-Tiny at
64 px), ``TRAIN``'s epochs, lr and batch, the rest the card's defaults (the authors'
``BASE_CONFIG`` with its ``base_lca`` experiment). cl-bench's side of the step check
and its inputs are adapter_rows.py's ``ours_step`` and bench/parity/methods/min/row.py's
``task_inputs``.

Step check (2 tasks at ``STEP``, no augmentation): cl-bench's initial adapters and each
task's new head are copied into the authors' code, both sides see the same batches in
the same order and seed the generator alike before every training forward (the same
adapter dropout masks) and before each alignment (the same Gaussian draws and
shuffles). Compared after the first step and after each task (the merge and the
alignment included): the adapters, every head, the last training loss and the test
logits. End to end: the same machinery at ``TRAIN`` for all three tasks, per seed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from bench.parity import adapter_rows as shared
from bench.parity.methods import ParityError

METHOD = "lca"
REFERENCE = {
    "repo": "tungts1101/LCA",
    "commit": "3e6670b6de7e622ffa646dc79a2fa9b5ddc7bc4e",
    "what": "lca.py Learner (train: CE, class statistics, TIES merge, local alignment) "
    "on backbone/vit_adapter.py as ViT-Tiny (bench/parity/methods/lca/reference.py)",
}
PAIRING = "paired"
PAIRING_WHY = (
    "one seed fixes the same randomness on both sides: cl-bench's initial adapters and "
    "heads (drawn after seed_everything(seed)) go into the authors' code, both sides "
    "read one batch order per task drawn from the seed, seed the generator alike "
    "before every training forward (the same dropout masks) and before each alignment "
    "(the same Gaussian draws and shuffles), with augmentation off"
)
CLASS_ORDER = shared.CLASS_ORDER
SEEDS = shared.SEEDS
STEP = {"epochs": 2, "lr": 0.1, "batch_size": 48}
TRAIN = {"epochs": 5, "lr": 0.05, "batch_size": 16}
TASKS = 3
SETTING = {
    "tree": "bench/parity/make_tree.py, 40 train / 30 test per class, Fashion-MNIST "
    f"classes {shared.FMNIST_CLASSES} as classes 0-5",
    "backbone": shared.BACKBONE,
    "weights": "export_weights.py (--weights random), 64 px",
    "image_size": shared.SIZE,
    "tasks": "3 x 2 classes",
    **TRAIN,
    "augmentation": "off on both sides (the step check's machinery)",
    "method": "methods/lca.yaml defaults otherwise",
    "step_check": f"{STEP}, 2 tasks, no augmentation",
}
NOTES = [
    "per_seed.*.learnt: top-1 on the newest task's test images right after training on it, "
    "predicted among all seen classes (chance 1/2, 1/4, 1/6 after tasks 1, 2, 3)",
    "the end-to-end runs use the step check's machinery with the seed's randomness shared "
    "(cl-bench's initial adapters and heads, its normalised images, one batch order, the "
    "same dropout masks and Gaussian draws, no augmentation): both sides train the same "
    "model, so equal curves are expected and any gap is a bug",
    "not run: the two sides left to themselves (the authors' shuffled loader and "
    "augmentation, their own initial adapters and heads)",
]
DRIVER = Path(__file__).resolve().parent / "reference.py"
BOUND = 2e-5
BOUND_WHY = (
    "float32 round-off through the Gaussian draws: the authors sample each class with a "
    "float32 MultivariateNormal (a float32 Cholesky factor), cl-bench with a float64 "
    "factor rounded to float32, of covariances that are nearly singular (40 images in "
    "192 dimensions: rank 39 plus 1e-4 I), so the same normal draws give samples that "
    "differ in their last float32 digits, carried through 10 alignment epochs; before "
    "the first alignment both sides run the same kernels and differ by a few ulps. A "
    "genuine difference (a merge rule, a missed region or robustness term, a head left "
    "out of the alignment) moves the heads by the learning rate times a gradient, 1e-3 "
    "or more"
)


def trainable(model) -> dict[str, torch.Tensor]:
    """cl-bench's adapters and every head, under the driver's names."""
    out = shared.ours_trainable(METHOD, model)
    for k, w in enumerate(model.head):
        out[f"head.{k}"] = w.detach().clone()
    return out


def initial(task: int, now: dict) -> dict:
    """Copied into the authors' code at each task: its new head; task 0 also the adapters."""
    return {k: v for k, v in now.items() if k == f"head.{task}" or (task == 0 and "head" not in k)}


def official_config(params: dict, seed: int, tasks: int) -> dict:
    """The authors' config keys (lca.py BASE_CONFIG, base_lca) for the card's ``params``."""
    return {
        "seed": seed,
        "reset_train": True,
        "reset_merge": True,
        "train_epochs": params["epochs"],
        "train_batch_size": params["batch_size"],
        "train_base_lr": params["lr"],
        "train_weight_decay": params["weight_decay"],
        "train_merge": "ties",
        "train_merge_coef": params["merge_coef"],
        "train_merge_topk": params["topk"],
        "train_merge_incremental": True,
        "model_backbone": "pretrained_vit_b16_224_adapter",
        "ffn_num": params["ffn"],
        "model_classifier": ["mlp"],
        "train_ca": True,
        "train_ca_samples_per_cls": params["ca_samples"],
        "train_ca_batch_size": params["ca_batch_size"],
        "train_ca_epochs": params["ca_epochs"],
        "train_ca_lr": params["ca_lr"],
        "train_ca_robust_weight": params["robust_weight"],
        "train_ca_entropy_weight": 0.0,
        "train_ca_logit_norm": None,
        "dataset_name": "parity",
        "dataset_num_task": tasks,
    }


def prepare(copy: Path) -> None:
    if not (copy / "lca.py").is_file() or not (copy / "backbone" / "vit_adapter.py").is_file():
        raise ParityError(f"{copy} lacks lca.py or backbone/vit_adapter.py")


def reference(copy: Path, work: Path, spec: dict, name: str) -> dict:
    """The driver on ``spec`` with cl-bench's interpreter; its output."""
    import json

    spec_path, out = work / f"{name}.json", work / f"{name}.pt"
    spec_path.write_text(json.dumps({**spec, "copy": str(copy)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARITY_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH="")
    with open(work / f"{name}.log", "w") as log:
        done = subprocess.run(
            ["nice", "-n", "10", sys.executable, str(DRIVER), str(spec_path), str(out)],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if done.returncode:
        raise ParityError(
            f"the authors' LCA code failed (exit {done.returncode}); see {work / f'{name}.log'}"
        )
    return torch.load(out, weights_only=False)


def paired(copy: Path, work: Path, seed: int, train: dict, tasks: int, name: str):
    """Both sides on cl-bench's tensors, images and batch order drawn from ``seed``."""
    from bench.parity.methods.min.row import task_inputs
    from cl_bench.cards.catalogue import load_method

    holder: dict = {}

    def keep(model):
        holder["model"] = model
        return trainable(model)

    ours = shared.ours_step(
        METHOD, work, seed, params=train, trainable=keep, initial=initial, tasks=tasks
    )
    _, weights = shared.inputs(work)
    inputs, init = work / f"{name}_inputs.pt", work / f"{name}_init.pt"
    torch.save(task_inputs(holder["model"], work, seed, ours["perms"], tasks), inputs)
    torch.save(ours["init"], init)
    card = load_method(METHOD)
    card.params.update(train)
    ref = reference(
        copy,
        work,
        {
            "config": official_config(card.params, seed, tasks),
            "inputs": str(inputs),
            "init": str(init),
            "seed": seed,
            "tasks": tasks,
            "size": shared.SIZE,
            "weights": str(weights),
        },
        name,
    )
    expected = torch.cat([y.repeat(train["epochs"]) for y in ref["batch_labels"]])
    if not torch.equal(torch.cat(ours["batch_labels"]), expected.to(torch.long)):
        raise ParityError("the training batches differ between the two sides")
    return ours, ref


def step(copy: Path, work: Path) -> dict:
    ours, ref = paired(copy, work, 0, STEP, shared.STEP_TASKS, "lca_step")
    out = {"after": shared.AFTER, "max_abs_param": [], "max_abs_loss": [], "max_abs_logit": []}
    for point in shared.AFTER:
        a, b = ours["points"][point], ref["points"][point]
        out["max_abs_param"].append(shared.max_abs(a["params"], b["params"]))
        out["max_abs_loss"].append(abs(a["loss"] - b["loss"]))
        out["max_abs_logit"].append(
            float((a["logits"].double() - b["logits"].double()).abs().max())
            if "logits" in a
            else 0.0
        )
    return {**out, "bound": BOUND, "bound_why": BOUND_WHY, "kept": []}


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    ours, ref = paired(copy, work, seed, TRAIN, TASKS, f"lca_seed_{seed}")
    out = {}
    for side, run in (("ours", ours), ("reference", ref)):
        curve, learnt = shared.accuracies(run, ours["test_labels"])
        out[side] = {"curve": curve, "learnt": learnt}
    return out
