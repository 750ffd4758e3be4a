"""MiN beside the authors' code (github thuwng/MiN-NeurIPS2025 at 292d883):
``MiN/models/MiN.py`` ``MinNet`` (``init_train`` / ``increment_train``) on
``MiN/utils/inc_net.py`` ``MiNbaseNet`` and ``MiN/backbones/ViT_MiN.py``, driven by
bench/parity/methods/min/reference.py on a copy patched by bench/parity/methods/min/patch.py.

The authors' ViT imports ``timm.layers`` (timm >= 0.9), which bench/.venv-avalanche's
timm 0.6.13 lacks, so their code runs with cl-bench's interpreter (timm 1.0.31, torch
2.14.1) and imports nothing of cl-bench, as the TOSCA row does.

Setting: bench/parity/adapter_rows.py's (six Fashion-MNIST classes of the parity tree,
40 train / 30 test images each, tasks of two classes in the folders' order, the
``--weights random`` ViT-Tiny at 64 px), the card's defaults (the authors'
ImageNet-R settings file) except ``STEP``: a projection of 512 columns (official 16384
for ViT-B; the same algebra, at 2-core cost), 2 epochs per task at lr 0.01, batch 16;
the paired seeds (``TRAIN``) run three tasks on the same machinery with one first fit
pass (``fit_epochs`` 1): every task is learnt on both sides (see NOTES).

The step check gives the authors' code cl-bench's initial tensors (every M_l, A_l,
B_l, the norm copies, the projection P, the first noise pair and the training head;
later tasks' noise pair and head, all zero on both sides), the same normalised images
(cl-bench's test transform and its ``Normalize``: augmentation off) and the same
training batch order (a permutation per task, every epoch); every other pass reads
the images in dataset order on both sides (official: shuffled; the least-squares fit
and the prototype do not depend on the order up to round-off). The test logits are
the analytic classifier's, which has no column before the first fit: none after step 1
(written 0). On the second task the noise pair does not move on either side (its
mixing weight is 0, the authors' behaviour the card keeps): the head and the fixed
analytic logits carry that task.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from bench.parity import adapter_rows as shared
from bench.parity.methods import ParityError

METHOD = "min"
REFERENCE = {
    "repo": "thuwng/MiN-NeurIPS2025",
    "commit": "292d8834b92a4b908939241b535d46e4e94d6bfe",
    "what": "MiN/models/MiN.py MinNet (init_train, increment_train)",
}
PAIRING = "paired"
PAIRING_WHY = (
    "one seed fixes the same randomness on both sides: cl-bench's initial and "
    "fixed tensors (drawn after seed_everything(seed)) go into the authors' "
    "code, and both sides read one batch order drawn from the seed"
)
CLASS_ORDER = shared.CLASS_ORDER
SEEDS = shared.SEEDS
STEP = {"init_epochs": 2, "epochs": 2, "lr": 0.01, "batch_size": 16, "buffer_size": 512}
TRAIN = {**STEP, "fit_epochs": 1}  # end to end, with the three tasks of the setting
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
    "method": "methods/min.yaml defaults otherwise",
    "step_check": f"{STEP}, 2 tasks, no augmentation",
}
NOTES = [
    "per_seed.*.learnt: top-1 on the newest task's test images right after training on it, "
    "predicted among all seen classes (chance 1/2, 1/4, 1/6 after tasks 1, 2, 3)",
    "the end-to-end runs use the step check's machinery with the seed's randomness shared "
    "(cl-bench's initial and fixed tensors, its normalised images, one batch order, no "
    "augmentation), 3 tasks, 2 epochs a task at lr 0.01, batch 16, a 512-column "
    "projection and one first fit pass (card: 3; a pass costs a backbone pass over the "
    "task): both sides then train the same model, so equal curves are expected and any "
    "gap is a bug; the third task's mixing weights are not zero (a softmax of prototype "
    "cosines), so these runs also exercise the noise mixture and the prototypes",
    "not run: the two sides left to themselves (the authors' shuffled loader and "
    "augmentation, their own draws of A_l, B_l and P)",
]
DRIVER = Path(__file__).resolve().parent / "reference.py"
BOUND = 1e-5
BOUND_WHY = (
    "float32 round-off: both sides run the same torch kernels on the same inputs, but "
    "sum in other orders and precisions (cl-bench adds the head's and the analytic "
    "logits in one pass and takes the loss in float32, the authors in float64 from a "
    "second pass; the noise is a forward hook on timm's blocks, theirs inline), a few "
    "float32 ulps of values up to about 10 (ulp 1e-6 at 8), carried through 10 SGD "
    "steps a task and the float64 least-squares fit; 1e-5 is about 10 ulps there, while "
    "a genuine difference (a missed weight decay, norm or noise term) moves the "
    "parameters by at least lr x weight decay x |p| or the gradient, 1e-4 or more"
)


def prepare(copy: Path) -> None:
    from bench.parity.methods.min.patch import patch

    try:
        patch(copy)
    except SystemExit as e:
        raise ParityError(str(e)) from None


def ours_tensors(holder: dict):
    """cl-bench's trainable tensors by name; keeps the model in ``holder``."""

    def trainable(model) -> dict[str, torch.Tensor]:
        holder["model"] = model
        out = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        if not out:
            raise ParityError("cl-bench's MiN has no trainable tensor")
        return out

    return trainable


def ours_initial(holder: dict):
    """What goes into the authors' code before each task: the trainable tensors, and
    before the first also the fixed A_l, B_l and P."""

    def initial(task: int, now: dict) -> dict:
        if task:
            return now
        model = holder["model"]
        fixed = {
            f"layers.{i}.{part}": getattr(layer, part).clone()
            for i, layer in enumerate(model.layers)
            for part in ("down", "up")
        }
        return {**now, **fixed, "projection": model.projection.clone()}

    return initial


def task_inputs(model, work: Path, seed: int, perms: dict, tasks: int) -> list[dict]:
    """Per task the normalised training images (dataset order), the batch order and the
    seen classes' test images, as cl-bench's side of adapter_rows.ours_step reads them."""
    from torch.utils.data import DataLoader

    from cl_bench.cards.catalogue import load_scenario
    from cl_bench.scenarios import load_data
    from cl_bench.scenarios.order import task_split
    from cl_bench.scenarios.stream import build_stream
    from cl_bench.scenarios.transforms import eval_transform

    tree, _ = shared.inputs(work)
    data = load_data(load_scenario("imagefolder"), tree)
    plain = eval_transform(data.on_disk, shared.SIZE)
    stream = build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        CLASS_ORDER,
        task_split(data.n_classes, 2, 2),
        test_shuffle=False,
        seed=seed,
        train_transform=plain,
        eval_transform=plain,
    )

    def images(dataset) -> dict:
        xs, ys = zip(*[(x, y) for x, y, *_ in DataLoader(dataset, batch_size=64)], strict=True)
        with torch.no_grad():
            return {"x": model.normalize(torch.cat(xs)), "y": torch.cat(ys)}

    return [
        {
            "train": images(stream.train[t].dataset.train()),
            "perm": perms[str(t)],
            "test": images(stream.seen_test[t].dataset.eval()),
        }
        for t in range(tasks)
    ]


def reference(copy: Path, work: Path, spec: dict, name: str) -> dict:
    """The driver on ``spec`` with cl-bench's interpreter; its output."""
    tree, weights = shared.inputs(work)
    spec_path, out = work / f"{name}.json", work / f"{name}.pt"
    spec_path.write_text(json.dumps({**spec, "copy": str(copy)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARITY_")}
    env.update(
        PARITY_WEIGHTS=str(weights),
        PARITY_IMG_SIZE=str(shared.SIZE),
        OMP_NUM_THREADS="1",
        PYTHONPATH="",
    )
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
            f"the authors' MiN code failed (exit {done.returncode}); see {work / f'{name}.log'}"
        )
    return torch.load(out, weights_only=False)


def official_args(params: dict) -> dict:
    """The authors' config keys for cl-bench's card ``params``."""
    return {
        "device": "cpu",
        "num_workers": 0,
        "pretrained": True,
        "backbone_type": "parity_vit_tiny_min",
        "optimizer_type": params["optimizer"],
        "scheduler_type": "step",
        "init_class": 2,
        "increment": 2,
        "init_epochs": params["init_epochs"],
        "epochs": params["epochs"],
        "init_lr": params["lr"],
        "lr": params["lr"],
        "init_weight_decay": params["weight_decay"],
        "weight_decay": params["weight_decay"],
        "init_batch_size": params["batch_size"],
        "batch_size": params["batch_size"],
        "buffer_size": params["buffer_size"],
        "buffer_batch": params["fit_batch_size"],
        "gamma": params["gamma"],
        "fit_epochs": params["fit_epochs"],
        "hidden_dim": params["hidden_dim"],
    }


def paired(
    copy: Path, work: Path, seed: int, params: dict, tasks: int, name: str
) -> tuple[dict, dict]:
    """Both sides on cl-bench's tensors, images and batch order drawn from ``seed``, with
    the card's ``params``, for ``tasks`` tasks: (cl-bench's records, the driver's)."""
    from cl_bench.cards.catalogue import load_method

    holder: dict = {}
    ours = shared.ours_step(
        METHOD,
        work,
        seed,
        params=params,
        trainable=ours_tensors(holder),
        initial=ours_initial(holder),
        tasks=tasks,
    )
    inputs, init = work / f"{name}_inputs.pt", work / f"{name}_init.pt"
    torch.save(task_inputs(holder["model"], work, seed, ours["perms"], tasks), inputs)
    torch.save(ours["init"], init)
    card = load_method(METHOD)
    card.params.update(params)
    ref = reference(
        copy,
        work,
        {
            "args": official_args(card.params),
            "tasks": tasks,
            "inputs": str(inputs),
            "init": str(init),
        },
        name,
    )
    expected = torch.cat([labels.repeat(params["epochs"]) for labels in ref["batch_labels"]])
    if not torch.equal(torch.cat(ours["batch_labels"]), expected.to(torch.long)):
        raise ParityError("the training batches differ between the two sides")
    return ours, ref


def step(copy: Path, work: Path) -> dict:
    ours, ref = paired(copy, work, 0, STEP, shared.STEP_TASKS, "min_step")
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
    ours, ref = paired(copy, work, seed, TRAIN, TASKS, f"min_seed_{seed}")
    out = {}
    for side, run in (("ours", ours), ("reference", ref)):
        curve, learnt = shared.accuracies(run, ours["test_labels"])
        out[side] = {"curve": curve, "learnt": learnt}
    return out
