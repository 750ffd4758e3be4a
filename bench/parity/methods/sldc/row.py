"""Parity row of SLDC (cl_bench/strategies/sldc.py) against the authors' code (github
raoxuan98-hash/sldc_rebuttal at fe0f492: ``models/sldc.py`` ``SubspaceLoRA``,
``models/sldc_modules.py`` ``SLDC_Drift_Compensator``, ``convs/vits.py``,
``utils/inc_net.py``), the linear compensation (alpha_1 / beta_1-SLDC, the card's
``compensation: linear``) with feature distillation (``gamma_kd`` 1, ``gamma_norm``
0.1), driven by bench/parity/methods/sldc/reference.py with cl-bench's interpreter.
The scratch copy is patched by bench/parity/methods/sldc/patch.py (a ViT-Tiny branch
of ``get_convnet``, whose official ViT-B builders hard-code ``nn.LayerNorm(768)`` and
the MoCo v3 checkpoint file; the cached Gaussian pool read unshuffled; the import of
``SLDC_Drift_Compensator`` that ``models/sldc.py`` lacks at fe0f492); the driver's
stand-ins (its docstring) give the code the CPU, the images, the batch order, the
same Gaussian draws as cl-bench's and evaluation through the linear-compensated
classifier. The equation-level check of the post-task statistics and losses is
bench/parity/methods/sldc/equations.py.

Setting: bench/parity/adapter_rows.py's (six Fashion-MNIST classes of the parity tree
in three tasks of two, one fixed class order, the ``--weights random`` ViT-Tiny at
64 px), ``TRAIN``'s epochs, lr and batch, the rest the card's defaults (which are the
authors' ``main_sldc.py`` defaults and the hard-coded refinement settings: 1,024
samples per class, 6 epochs, Adam at 5e-4). cl-bench's side of the step check is
adapter_rows.py's ``ours_step``, its inputs bench/parity/methods/min/row.py's
``task_inputs``.

Step check (2 tasks at ``STEP``, no augmentation): cl-bench's initial LoRA factors and
each task's new head block are copied into the authors' code, both sides see the same
batches in the same order and seed the generator alike before each refinement of the
unified classifier (the same Gaussian draws, class by class, and the same shuffles).
Compared after the first step and after each task (the drift compensation and the
refinement included): the LoRA factors, every head block, the head's scales, the
unified classifier, the last training loss (the second task's with the distillation
terms) and the test logits of the unified classifier. End to end: the same machinery
at ``TRAIN`` for all three tasks, per seed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from bench.parity import adapter_rows as shared
from bench.parity.methods import ParityError

METHOD = "sldc"
REFERENCE = {
    "repo": "raoxuan98-hash/sldc_rebuttal",
    "commit": "fe0f492fb45e26dbca4f26fff3cac0316768d368",
    "what": "models/sldc.py SubspaceLoRA with models/sldc_modules.py's linear compensator "
    "on convs/vits.py's LoRA ViT as ViT-Tiny (bench/parity/methods/sldc/reference.py)",
}
PAIRING = "paired"
PAIRING_WHY = (
    "one seed fixes the same randomness on both sides: cl-bench's initial LoRA factors and "
    "head blocks (drawn after seed_everything(seed)) go into the authors' code, both sides "
    "read one batch order per task drawn from the seed and seed the generator alike before "
    "each refinement of the unified classifier (the same Gaussian draws and shuffles), with "
    "augmentation off; the ViT has no dropout"
)
CLASS_ORDER = shared.CLASS_ORDER
SEEDS = shared.SEEDS
STEP = {"epochs": 2, "lr": 0.001, "batch_size": 16}
TRAIN = {"epochs": 2, "lr": 0.001, "batch_size": 16}
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
    "method": "methods/sldc.yaml defaults otherwise (compensation linear, gamma_kd 1.0, "
    "gamma_norm 0.1, LoRA rank 4, refinement 1,024 samples per class for 6 epochs)",
    "step_check": f"{STEP}, 2 tasks, no augmentation",
}
NOTES = [
    "the authors' copy is patched by bench/parity/methods/sldc/patch.py: (1) a ViT-Tiny "
    "branch parity-vit-tiny-lora of utils/inc_net.py get_convnet, its fresh final norm at "
    "eps 1e-6 (official builders: ViT-B with nn.LayerNorm(768), eps 1e-5, and "
    "mocov3-vit-base-300ep.pth; the eps is the step check's kept difference), (2) the "
    "cached Gaussian pool read unshuffled in train_classifier_with_cached_samples, (3) the "
    "import of "
    "SLDC_Drift_Compensator missing from models/sldc.py at fe0f492 (a NameError as "
    "published); the driver "
    "(bench/parity/methods/sldc/reference.py) runs it on the CPU, stores cl-bench's draws "
    "in that pool, and classifies through linear_fc",
    "per_seed.*.learnt: top-1 on the newest task's test images right after training on it, "
    "predicted among all seen classes (chance 1/2, 1/4, 1/6 after tasks 1, 2, 3)",
    "the end-to-end runs use the step check's machinery with the seed's randomness shared "
    "(cl-bench's initial LoRA factors and head blocks, its normalised images, one batch "
    "order, the same Gaussian draws, no augmentation): both sides train the same model, so "
    "equal curves are expected and any gap is a bug",
    "not run: the two sides left to themselves (the authors' shuffled loader and "
    "augmentation, their own pool of 50,000 cached draws)",
]
DRIVER = Path(__file__).resolve().parent / "reference.py"
BOUND = 2e-3
BOUND_WHY = (
    "float32 round-off amplified by Adam and by the authors' float32 ridge solve: AdamW "
    "moves each entry by lr g / (|g| + 1e-8), so entries whose gradient is near 1e-8 (a "
    "fresh B) turn round-off into a fraction of the learning rate (after step 1: 1.3e-6); "
    "the drift operator solves X^T X + 1e-4 I with 80 samples in 192 dimensions (rank 80 "
    "plus the ridge, condition about 1e4) in float32 where cl-bench solves in float64, and "
    "the authors factor with their own float32 Cholesky. Measured at seed 0: the training "
    "tensors within 5.3e-5 after task 2, the unified classifier 2.0e-4 (8.3e-5 with the "
    "authors' solve run in float64 in a trial), its test logits (up to 11.9 in size) "
    "9.7e-4, no prediction changed. A wrong equation (a missed distillation term, a "
    "covariance not transported, a head left out of the refinement) changes the gradient "
    "of every step, and AdamW moves an entry by up to the learning rate per step (1e-3 "
    "here, 10 steps per task: head entries at 1e-2 per step); the bound does not "
    "separate the final norm's eps (kept below), which moves the tensors by 1.3e-3"
)
KEPT = [
    "final norm eps: the authors replace the ViT's final norm by a fresh nn.LayerNorm, eps "
    "1e-5 (torch's default); cl-bench's final_norm: plain keeps the ViT's eps 1e-6. The "
    "step check patches the authors' to 1e-6 (patch.py, edit 1), as do the paired seeds; "
    "with their 1e-5 the first-batch loss differs by 3e-5 and the tensors after task 2 by "
    "1.3e-3 (features change by about 5e-6 / variance of the [CLS] token). No card switch "
    "sets it: a difference of the norm's eps only"
]


def trainable(model) -> dict[str, torch.Tensor]:
    """cl-bench's LoRA factors, head blocks and scales, and its unified classifier once it
    has one, under the driver's names."""
    out = {}
    for key, update in model.sets[0].updates.items():
        out[f"lora.{key}.A"] = update.A.detach().clone()
        out[f"lora.{key}.B"] = update.B.detach().clone()
    for k, block in enumerate(model.head):
        out[f"head.{k}"] = block.detach().clone()
    out["head_scale"] = torch.cat(list(model.head_scale)).detach().clone()
    if model.unified_weight.numel():
        out["unified.weight"] = model.unified_weight.detach().clone()
        out["unified.scale"] = model.unified_scale.detach().clone()
    return out


def initial(task: int, now: dict) -> dict:
    """Copied into the authors' code at each task: its new head block; task 0 also the
    LoRA factors."""
    return {k: v for k, v in now.items() if k == f"head.{task}" or (task == 0 and "lora" in k)}


def official_config(params: dict, seed: int, tasks: int) -> dict:
    """The authors' ``args`` (main_sldc.py) for the card's ``params``."""
    return {
        "seed": seed,
        "run_id": 0,
        "prefix": "parity",
        "model_name": "sldc",
        "convnet_type": "parity-vit-tiny-lora",
        "device": ["cpu"],
        "memory_size": 0,
        "memory_per_class": 0,
        "fixed_memory": False,
        "init_cls": 2,
        "increment": 2,
        "test_only": False,
        "only_lora": True,
        "lora_rank": params["lora_rank"],
        "weight_decay": params["weight_decay"],
        "lrate": params["lr"],
        "epochs": params["epochs"],
        "ca_epochs": params["ca_epochs"],
        "optimizer": params["optimizer"],
        "head_scale": params["head_lr_ratio"],
        "gamma_kd": params["gamma_kd"],
        "gamma_norm": params["gamma_norm"],
        "batch_size": params["batch_size"],
        "kd_type": "feat",
        "sce_a": params["sce_a"],
        "sce_b": params["sce_b"],
        "use_linear_compensation": True,
        "use_weak_nonlinear_compensation": False,
        "use_mlp_compensation": False,
        "gamma_1": params["gamma_1"],
        "gamma_2": 0.5,
        "alpha_t": params["alpha_t"],
        "use_auxiliary_data_enhancement": False,
        "auxiliary_data_size": 0,
    }


def prepare(copy: Path) -> None:
    from bench.parity.methods.sldc import patch

    try:
        patch.patch(copy)
    except SystemExit as error:
        raise ParityError(f"patching {copy}: {error}") from None


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
            f"the authors' SLDC code failed (exit {done.returncode}); see {work / f'{name}.log'}"
        )
    return torch.load(out, weights_only=False)


def paired(copy: Path, work: Path, seed: int, train: dict, tasks: int, name: str):
    """Both sides on cl-bench's tensors, images and batch order drawn from ``seed``."""
    from bench.parity.methods.min.row import task_inputs
    from cl_bench.cards.catalogue import load_method
    from cl_bench.strategies.sldc import SldcNet

    holder: dict = {}

    def keep(model):
        holder["model"] = model
        return trainable(model)

    refine = SldcNet.refine

    def seeded_refine(self):  # the same Gaussian draws and shuffles as the driver's
        torch.manual_seed(seed)
        return refine(self)

    SldcNet.refine = seeded_refine
    try:
        ours = shared.ours_step(
            METHOD, work, seed, params=train, trainable=keep, initial=initial, tasks=tasks
        )
    finally:
        SldcNet.refine = refine
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
    torch.save(ours, work / f"{name}_ours.pt")  # beside the reference's {name}.pt
    return ours, ref


def step(copy: Path, work: Path) -> dict:
    ours, ref = paired(copy, work, 0, STEP, shared.STEP_TASKS, "sldc_step")
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
    return {**out, "bound": BOUND, "bound_why": BOUND_WHY, "kept": list(KEPT)}


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    ours, ref = paired(copy, work, seed, TRAIN, TASKS, f"sldc_seed_{seed}")
    out = {}
    for side, run in (("ours", ours), ("reference", ref)):
        curve, learnt = shared.accuracies(run, ours["test_labels"])
        out[side] = {"curve": curve, "learnt": learnt}
    return out
