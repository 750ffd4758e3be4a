"""CODA-Prompt beside LAMDA-PILOT's ``models/coda_prompt.py`` (see methods/__init__.py).

Both the step check and the paired seeds run one machinery: methods/coda_prompt/ours.py
runs cl-bench's strategy on fixed batches (the first images of each class through the
test transform, no augmentation, in one order drawn from the seed, kept every epoch)
and records its initial tensors, Gram-Schmidt draws, losses and test logits;
methods/coda_prompt/reference.py runs PILOT's ``Learner`` (its ``_train``, optimizer,
schedule and loss) from cl-bench's initial head, components, keys and attention
vectors on the same batches. fp32, one thread, on both sides.

Step check (``STEP``, seed 0): twice, with the card's ``gram_schmidt: qr`` (PILOT
trains from cl-bench's new components, its own Gram-Schmidt of the same draws is
compared apart) and with ``gram_schmidt: official`` (PILOT trains from its own
Gram-Schmidt of the same draws). The orthogonality penalty is on (``ortho_mu`` 1, the
card's default is 0) so that the loss compared includes it; its term is also compared
alone (``ortho_term``).

Paired seeds (``TRAIN``, seeds 1-10): the same machinery for the three tasks of the
setting with the card's ``qr``; the curves come from each side's test logits after each
task. Inputs: bench/parity/prompted.py's six-class tree and gain-6 random ViT-Tiny (at
32 px here), where the L2P and DualPrompt rows learn every task.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from bench.parity import patch_pilot, patch_pilot_prompts, prompted
from bench.parity.methods import ParityError

METHOD = "coda-prompt"
REFERENCE = {
    "repo": "sun-hailong/LAMDA-PILOT",
    "commit": "264745534fc2233f5a50b020e50a3472c47eb756",
    "what": "models/coda_prompt.py Learner",
}
PAIRING = "paired"
PAIRING_WHY = (
    "one seed fixes the same randomness on both sides: cl-bench's initial head, "
    "prompt components, keys and attention vectors (drawn after "
    "torch.manual_seed(seed), each task's new rows by its QR) are loaded into "
    "PILOT's Learner, and both sides read one batch order drawn from the seed "
    "(the same tensors, augmentation off)."
)
SIZE = 32
# The whole tree (40 / 30 images per class) at lr 0.01: searched with cl-bench's side
# alone (both sides train the same model here). With 24 / 20 images at lr 0.003 seed 5's
# second task scored 30 % right after training on it (its ankle boots went to the older
# bag row), seeds 9 and 10's 60 %; at lr 0.01 62.5 / 80 / 52.5 %; with 40 / 30 images at
# lr 0.01 100 / 68.3 / 70 % (chance 25 %), every third task above 90 %.
TRAIN = {
    "train_per_class": 40,
    "test_per_class": 30,
    "increment": 2,
    "tasks": 3,
    "epochs": 5,
    "lr": 0.01,
    "batch_size": 8,
    "eval_batch_size": 8,
    "ortho_mu": 0.0,
    "gram_schmidt": "qr",
}
SETTING = {
    "tree": "bench/parity/prompted.py's tree (Fashion-MNIST classes "
    f"{prompted.FMNIST_CLASSES} as 0-5), the first {TRAIN['train_per_class']} train / "
    f"{TRAIN['test_per_class']} test images per class",
    "backbone": "vit_tiny_patch16_224, cl-bench's seeded random init "
    "(bench/parity/export_weights.py), block weights (qkv, proj, fc1, fc2) x "
    f"{prompted.BLOCK_GAIN:g} (prompted.py)",
    "image_size": SIZE,
    "tasks": "3 x 2 classes",
    **TRAIN,
    "optimizer": "adam",
    "scheduler": "coda_cosine (PILOT: cosine)",
    "pool_size": 100,
    "length": 8,
    "augmentation": "off on both sides (the step check's machinery)",
    "step_check": "16 train / 10 test images per class, 2 tasks, 2 epochs, batch 16, "
    "lr 0.001, ortho_mu 1, seed 0",
}
CLASS_ORDER = list(range(len(prompted.FMNIST_CLASSES)))
SEEDS = list(range(1, 11))
STEP = {
    "train_per_class": 16,
    "test_per_class": 10,
    "increment": 2,
    "tasks": 2,
    "epochs": 2,
    "batch_size": 16,
    "eval_batch_size": 16,
    "ortho_mu": 1.0,
}
BOUND = 1e-4
TIGHT = 1e-5  # the tighter bound asked about: how many elements exceed it (params_over_tight)
BOUND_WHY = (
    "Loss and logits agree to ~1e-6 (float32 round-off: cl-bench's timm runs the fused "
    "scaled_dot_product_attention, PILOT an explicit softmax, and the component weights take "
    "two algebraically equal forms). Parameters move by Adam steps lr m / (sqrt(v) + eps): an "
    "element whose gradient is near eps (1e-8) takes a step proportional to it, so the "
    "round-off of such a gradient changes its step by a visible part of lr (1e-3): the "
    "element farthest apart after step 1 took 0.12 lr on its first step, a gradient of "
    "1.4e-9 (worst_first_step). A bound of 1e-5 does not hold for that reason "
    "(params_over_tight: 1 / 1 / 3 of the 961158 elements exceed it), nor for cl-bench "
    "against itself: with timm's explicit attention (TIMM_FUSED_ATTN=0, PILOT's form) "
    "cl-bench's parameters end 8.8e-6 / 8.7e-6 / 2.3e-5 from its own fused run and "
    "4.6e-6 / 4.6e-6 / 1.3e-5 from PILOT's. The bound is lr / 10; a logic difference moves "
    "parameters by about lr per step (the one-epoch schedule shift this check found gave "
    "2e-3 after task 1)."
)
NOTES = [
    "per_seed.*.learnt: top-1 on the newest task's test images right after training on it, "
    "predicted among all seen classes (chance 50, 25, 16.7 %); per_seed.gap: after each "
    "task, the largest difference of any trainable tensor and of the test logits, and how "
    "many test predictions differ between the sides",
    "the paired seeds run the step check's machinery for the three tasks of the setting "
    "with the seed's randomness shared (cl-bench's initial head, components, keys and "
    "attention vectors, one batch order, no augmentation): both sides train the same "
    "model, so equal curves are expected up to a round-off flip of a test prediction, and "
    "any larger gap would be a bug",
    "the sides' parameters and logits drift apart as training goes on (after task 3 up to "
    "0.2 and 0.71 apart; 2 of 180 test predictions differ on seeds 3 and 6, none on the "
    "others): training at lr 0.01 amplifies float32 round-off (Adam's steps on gradients "
    "near eps), as much within cl-bench: on seed 1, cl-bench with only timm's attention "
    "kernel changed (TIMM_FUSED_ATTN=0, the explicit softmax PILOT uses, algebraically "
    "equal) ends 0.2 from its own fused run in parameters and 0.10 in logits after task 3, "
    "while the fused run ends 0.017 / 0.017 from PILOT; at lr 0.003 (24 / 20 images, "
    "seed 4) the same gaps were 5.3e-4 within cl-bench and 9.4e-4 to PILOT",
    "earlier, unpaired (bench/parity/results/coda-prompt.json at commit 6328363): cl-bench "
    "run against PILOT's main.py, each side with its own head, components, batch order and "
    "crops (augmentation on), Fashion-MNIST classes [1, 4, 2, 5, 8, 7], 24 / 20 images, "
    "the plain random ViT-Tiny at 32 px, 5 epochs at lr 0.003: over 10 seeds Welch avg "
    "+3.35 [-0.98, +7.67], last +5.17 [-1.43, +11.77], cl-bench higher in 7. The third "
    "task was often not learnt on either side (PILOT seed 1: 2.5 %, cl-bench seed 5: 0 %: "
    "an older class's head row took its images), so the last accuracy turned on each "
    "side's own draws; that setting, paired with this machinery, gave equal curves too "
    "(seed 1: 97.5 / 63.75 / 50.0 on both sides, no prediction differed)",
    "not run: the two sides left to themselves in this setting (PILOT's main.py with its "
    "shuffled loader, crops and its own draws)",
]

REPO = Path(__file__).resolve().parents[4]
REF_PYTHON = REPO / "bench" / ".venv-avalanche" / "bin" / "python"
HERE = Path(__file__).resolve().parent


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **extra}
    env["PYTHONPATH"] = str(REPO)
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> str:
    """Run ``cmd`` at low priority; its output goes to ``log``; refuse a failure."""
    with open(log, "w") as out:
        done = subprocess.run(
            ["nice", "-n", "10", *cmd], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    if done.returncode:
        raise ParityError(f"{' '.join(cmd[:3])} ... failed ({done.returncode}); see {log}")
    return log.read_text()


def prepare(copy: Path) -> None:
    """patch_pilot.py (weights, CPU) and patch_pilot_prompts.py (CODA's width from the backbone,
    its prompt loss on the CPU); the drivers hand PILOT its tensors, not its data."""
    try:
        patch_pilot.patch(copy)
        patch_pilot_prompts.patch(copy)
    except SystemExit as e:  # the patch scripts stop on a missing anchor
        raise ParityError(str(e)) from None


def pair(copy: Path, work: Path, setting: dict, seed: int, name: str) -> tuple[dict, dict]:
    """Both drivers on ``setting`` (driver JSON, see methods/coda_prompt/ours.py) with the
    randomness of ``seed``: (cl-bench's records, PILOT's), kept as ``name``-*.pt in
    work/``name`` with their logs."""
    tree, weights = prompted.inputs(work, SIZE)
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    ours, ref = folder / "ours.pt", folder / "ref.pt"
    _run(
        [
            sys.executable,
            "-m",
            "bench.parity.methods.coda_prompt.ours",
            str(ours),
            str(weights),
            str(tree),
            str(SIZE),
            str(seed),
            json.dumps(setting),
        ],
        REPO,
        _env(),
        folder / "ours.log",
    )
    _run(
        [str(REF_PYTHON), str(HERE / "reference.py"), str(ours), str(ref)],
        copy,
        _env(PARITY_WEIGHTS=str(weights), PARITY_IMG_SIZE=str(SIZE)),
        folder / "ref.log",
    )
    return torch.load(ours, weights_only=False), torch.load(ref, weights_only=False)


def _differences(ours: dict, ref: dict) -> dict:
    after = ["step 1", "task 1", "task 2"]
    losses = [
        [abs(a - b) for a, b in zip(o, r, strict=True)]
        for o, r in zip(ours["losses"], ref["losses"], strict=True)
    ]
    ortho = [
        abs(a - b)
        for o, r in zip(ours["ortho"], ref["ortho"], strict=True)
        for a, b in zip(o, r, strict=True)
    ]
    largest = max(abs(v) for o in ours["ortho"] for v in o)
    gaps = [
        {
            n: (ours["after"][k]["params"][n] - ref["after"][k]["params"][n]).abs()
            for n in ours["after"][k]["params"]
        }
        for k in after
    ]
    return {
        "ortho_term": {"largest": largest, "max_abs_diff": max(ortho)},
        "after": after,
        "max_abs_param": [max(g.max().item() for g in gap.values()) for gap in gaps],
        "params_over_tight": [sum(int(g.gt(TIGHT).sum()) for g in gap.values()) for gap in gaps],
        "params": sum(t.numel() for t in ours["after"]["step 1"]["params"].values()),
        "max_abs_loss": [losses[0][0], max(losses[0]), max(losses[1])],
        "max_abs_logit": [
            (ours["after"][k]["logits"] - ref["after"][k]["logits"]).abs().max().item()
            for k in after
        ],
    }


def _gram_schmidt(ours: dict, ref: dict) -> dict:
    """PILOT's Gram-Schmidt of cl-bench's draws against cl-bench's rows, per task:
    the largest difference once each row's sign is matched, the share of rows whose
    sign differs, and the largest |cos| of a new row with an earlier one."""
    out = []
    for task, pilot in enumerate(ref["gram_schmidt"]):
        per = pilot["k"].shape[1]
        rows = slice(task * per, (task + 1) * per)
        diff, flips, cos_ours, cos_ref = 0.0, [], 0.0, 0.0
        for name in ("p", "k", "a"):
            a = ours["init"][task][name][:, rows].flatten(2)
            b = pilot[name].flatten(2)
            sign = torch.sign((a * b).sum(-1, keepdim=True))
            diff = max(diff, (a * sign - b).abs().max().item())
            flips.append((sign < 0).float().mean().item())
            if task:
                old = ours["init"][task][name][:, : task * per].flatten(2)
                old = old / old.norm(dim=-1, keepdim=True)
                cos_ours = max(cos_ours, (a @ old.transpose(1, 2)).abs().max().item())
                cos_ref = max(cos_ref, (b @ old.transpose(1, 2)).abs().max().item())
        out.append(
            {
                "max_abs_after_sign": diff,
                "sign_flipped": sum(flips) / len(flips),
                "max_cos_old_ours": cos_ours,
                "max_cos_old_reference": cos_ref,
            }
        )
    return out


def worst_first_step(ours: dict, ref: dict) -> dict:
    """The element farthest apart after step 1, and its own first Adam step on cl-bench's
    side as a share of lr: Adam's first step is lr g / (|g| + eps), so a share s well
    below 1 means |g| = eps s / (1 - s), a gradient near eps whose round-off moves it."""
    eps = 1e-8  # torch.optim.Adam's default, both sides
    first, start = ours["after"]["step 1"]["params"], ours["init"][0]
    name = max(
        first, key=lambda n: (first[n] - ref["after"]["step 1"]["params"][n]).abs().max().item()
    )
    i = (first[name] - ref["after"]["step 1"]["params"][name]).abs().argmax()
    share = (first[name].flatten()[i] - start[name].flatten()[i]).abs().item() / ours["params"][
        "lr"
    ]
    return {
        "tensor": name,
        "step_over_lr": share,
        "gradient": eps * share / (1 - share) if share < 1 else None,
    }


def step(copy: Path, work: Path) -> dict:
    ours, ref = pair(copy, work, {**STEP, "gram_schmidt": "qr"}, 0, "step-qr")
    result = {**_differences(ours, ref), "bound": BOUND, "bound_why": BOUND_WHY}
    gs = _gram_schmidt(ours, ref)
    official = _differences(
        *pair(copy, work, {**STEP, "gram_schmidt": "official"}, 0, "step-official")
    )
    task2 = gs[1]
    result["kept"] = [
        "New components at a task boundary (gram_schmidt: qr, the default): cl-bench makes "
        "them orthonormal to each other and to every earlier component (Householder QR); "
        "PILOT's classical Gram-Schmidt projects each draw on the trained earlier rows one "
        "by one, which training has moved off orthonormality. From the same Gaussian draws: "
        f"task 1 equal up to each row's sign (QR flips {gs[0]['sign_flipped']:.0%} of rows; "
        f"{gs[0]['max_abs_after_sign']:.1e} after matching signs); task 2 up to "
        f"{task2['max_abs_after_sign']:.1e} apart, PILOT's new rows at |cos| up to "
        f"{task2['max_cos_old_reference']:.1e} with earlier rows (cl-bench "
        f"{task2['max_cos_old_ours']:.1e}). The step check trains PILOT from cl-bench's "
        "components. gram_schmidt: official reproduces PILOT: with it, PILOT trains from its "
        "own Gram-Schmidt of the shared draws and the largest differences after step 1 / "
        "task 1 / task 2 are: parameters "
        + " / ".join(f"{v:.1e}" for v in official["max_abs_param"])
        + ", loss "
        + " / ".join(f"{v:.1e}" for v in official["max_abs_loss"])
        + ", logits "
        + " / ".join(f"{v:.1e}" for v in official["max_abs_logit"])
        + ".",
    ]
    result["gram_schmidt"] = gs
    result["worst_first_step"] = worst_first_step(ours, ref)
    result["official_rule"] = official
    return result


def accuracies(run: dict, test_y: torch.Tensor, tasks: int) -> dict:
    """From one side's test logits after each task: the top-1 accuracy over the seen
    classes (``curve``) and on the newest task's classes (``learnt``, predicted among all
    seen classes), in percent; the logits are those of the seen classes' test images."""
    curve, learnt = [], []
    for t in range(tasks):
        logits = run["after"][f"task {t + 1}"]["logits"]
        y = test_y[test_y < logits.shape[1]]
        hit = logits.argmax(1) == y
        curve.append(100.0 * hit.float().mean().item())
        learnt.append(100.0 * hit[y >= TRAIN["increment"] * t].float().mean().item())
    return {"curve": curve, "learnt": learnt}


def gaps(ours: dict, ref: dict, points: list[str]) -> dict:
    """After each of ``points``: the largest difference of any trainable tensor and of
    the test logits, and how many test predictions (argmax) differ between the sides."""
    return {
        "max_abs_param": [
            max(
                (ours["after"][k]["params"][n] - ref["after"][k]["params"][n]).abs().max().item()
                for n in ours["after"][k]["params"]
            )
            for k in points
        ],
        "max_abs_logit": [
            (ours["after"][k]["logits"] - ref["after"][k]["logits"]).abs().max().item()
            for k in points
        ],
        "argmax_flips": [
            int((ours["after"][k]["logits"].argmax(1) != ref["after"][k]["logits"].argmax(1)).sum())
            for k in points
        ],
    }


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    ours, ref = pair(copy, work, TRAIN, seed, f"seed-{seed}")
    test_y = ours["test"][1]
    points = [f"task {t + 1}" for t in range(TRAIN["tasks"])]
    return {
        "ours": accuracies(ours, test_y, TRAIN["tasks"]),
        "reference": accuracies(ref, test_y, TRAIN["tasks"]),
        "gap": gaps(ours, ref, points),
    }
