"""CODA-Prompt beside LAMDA-PILOT's ``models/coda_prompt.py`` (see rows/__init__.py).

Step check: drivers/coda_prompt_ours.py runs cl-bench's strategy on fixed batches and
records its initial tensors and Gram-Schmidt draws; drivers/coda_prompt_ref.py runs
PILOT's ``Learner`` from them on the same batches. Twice: with the card's
``gram_schmidt: qr`` (PILOT trains from cl-bench's new components, its own
Gram-Schmidt of the same draws is compared apart) and with ``gram_schmidt:
official`` (PILOT trains from its own Gram-Schmidt of the same draws). The
orthogonality penalty is on (``ortho_mu`` 1, the card's default is 0) so that the
loss compared includes it; its term is also compared alone (``ortho_term``).

End to end: ``cl-bench run`` and PILOT's ``main.py`` on six classes of the parity
tree (the first 24 train / 20 test Fashion-MNIST images per class,
bench/parity/make_tree.py) in a fixed order, 3 tasks of 2, with the random ViT-Tiny
of bench/parity/export_weights.py at 32 px.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from bench.parity import patch_coda, patch_pc, patch_pilot
from bench.parity.rows import ParityError

METHOD = "coda-prompt"
REFERENCE = {"repo": "sun-hailong/LAMDA-PILOT",
             "commit": "264745534fc2233f5a50b020e50a3472c47eb756",
             "what": "models/coda_prompt.py Learner"}
PAIRING = "welch"
PAIRING_WHY = ("The seed fixes each side's own draws only: the components' Gram-Schmidt and "
               "the head (cl-bench: Householder QR, PILOT: its loop after a uniform init), the "
               "batch order and the random crops come from different generators and call "
               "orders, so the runs of one seed are not paired; the class order is fixed.")
DIFFERS_WHY = (
    "Seed spread, not a found difference: the step check, where both sides share the draws, "
    "agrees to float32 round-off. End to end each side draws its own initial head, "
    "components, batch order and crops (Welch), and with a random ViT-Tiny whether a task "
    "is learnt right after training depends on those draws (a task whose images keep an "
    "earlier task's larger logits: e.g. PILOT's seed 1 third task at 2.5 % while its seed 2 "
    "third task is at 82.5 %), which widens the interval over 10 seeds per side.")
SIZE = 32
TREE = (24, 20)  # train / test images per class
# Fashion-MNIST ids in task order: trouser, coat | pullover, sandal | bag, sneaker. With
# a random ViT-Tiny a task whose classes look like an earlier task's is not learnt
# (its images keep the old classes' larger logits: the issue's "last task at 0 %");
# these three pairs were chosen, from random 3-pair draws, as those whose later tasks a
# head trained on the frozen features learnt best over 6 seeds (natural order 0-9 left
# tasks 4 and 5 near 0 %, trouser, bag | T-shirt, dress | sneaker, ankle boot task 2).
CLASSES = [1, 4, 2, 5, 8, 7]
SETTING = {
    "tree": f"Fashion-MNIST parity tree, first {TREE[0]} train / {TREE[1]} test images per "
            f"class (bench/parity/make_tree.py), classes {CLASSES} as 0-5",
    "backbone": "vit_tiny_patch16_224, random init (bench/parity/export_weights.py)",
    "image_size": SIZE, "tasks": "3 x 2 classes", "epochs": 5, "lr": 0.003,
    "batch_size": 8, "eval_batch_size": 8, "optimizer": "adam",
    "scheduler": "coda_cosine (PILOT: cosine)", "pool_size": 100, "length": 8,
    "ortho_mu": 0.0, "gram_schmidt": "qr", "augmentation": "train RandomResizedCrop + flip",
}
CLASS_ORDER = list(range(len(CLASSES)))
SEEDS = list(range(1, 11))
STEP = {"train_per_class": 16, "test_per_class": 10, "increment": 2, "tasks": 2,
        "epochs": 2, "batch_size": 16, "eval_batch_size": 16, "ortho_mu": 1.0, "seed": 0}
BOUND = 1e-4
BOUND_WHY = (
    "Loss and logits agree to ~1e-6 (float32 round-off of two attention kernels: timm's "
    "fused scaled_dot_product_attention vs PILOT's explicit softmax, and two algebraically "
    "equal forms of the component weights). Parameters move by Adam steps lr m/(sqrt(v) + "
    "eps): an element whose gradient is near eps (1e-8) takes a step proportional to it, so "
    "the round-off of such a gradient changes its step by a visible part of lr (1e-3); the "
    "bound is lr / 10. A logic difference moves parameters by about lr per step (the "
    "one-epoch schedule shift this check found gave 2e-3 after task 1).")

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / "bench" / ".venv-avalanche" / "bin" / "python"
DRIVERS = Path(__file__).resolve().parents[1] / "drivers"


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **extra}
    env["PYTHONPATH"] = str(REPO)
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> str:
    """Run ``cmd`` at low priority; its output goes to ``log``; refuse a failure."""
    with open(log, "w") as out:
        done = subprocess.run(["nice", "-n", "10", *cmd], cwd=cwd, env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    if done.returncode:
        raise ParityError(f"{' '.join(cmd[:3])} ... failed ({done.returncode}); see {log}")
    return log.read_text()


def inputs(work: Path) -> tuple[Path, Path]:
    """The tree and the weights, made once in ``work``. The tree holds the classes
    ``CLASSES`` of make_tree.py's tree, renamed ``class_00``... in that order, so that
    the natural order of both sides (sorted folder names) is the row's class order."""
    from bench.parity.export_weights import export
    from bench.parity.make_tree import write_tree
    tree, weights = work / "tree", work / f"vit_tiny_random_{SIZE}.pth"
    if not (tree / "test").is_dir():
        full = work / f"tree-{TREE[0]}-{TREE[1]}"
        if not (full / "test").is_dir():
            write_tree(full, *TREE)
        for split in ("train", "test"):
            for i, c in enumerate(CLASSES):
                shutil.copytree(full / split / f"class_{c:02d}", tree / split / f"class_{i:02d}")
    if not weights.is_file():
        export(weights, SIZE)
    return tree, weights


def prepare(copy: Path) -> None:
    """patch_pilot.py (tree, weights, CPU, no workers), patch_pc.py (CODA's width
    from the backbone, its prompt loss on the CPU), patch_coda.py (the class order)."""
    try:
        patch_pilot.patch(copy)
        patch_pc.patch(copy)
        patch_coda.patch(copy)
    except SystemExit as e:  # the patch scripts stop on a missing anchor
        raise ParityError(str(e)) from None


def _step_pair(copy: Path, work: Path, rule: str) -> tuple[dict, dict]:
    tree, weights = inputs(work)
    folder = work / "step"
    folder.mkdir(exist_ok=True)
    ours, ref = folder / f"ours-{rule}.pt", folder / f"ref-{rule}.pt"
    setting = {**STEP, "gram_schmidt": rule}
    _run([sys.executable, "-m", "bench.parity.drivers.coda_prompt_ours", str(ours),
          str(weights), str(tree), str(SIZE), str(STEP["seed"]), json.dumps(setting)],
         REPO, _env(), folder / f"ours-{rule}.log")
    _run([str(REF_PYTHON), str(DRIVERS / "coda_prompt_ref.py"), str(ours), str(ref)], copy,
         _env(PARITY_WEIGHTS=str(weights), PARITY_IMG_SIZE=str(SIZE)),
         folder / f"ref-{rule}.log")
    return torch.load(ours, weights_only=False), torch.load(ref, weights_only=False)


def _differences(ours: dict, ref: dict) -> dict:
    after = ["step 1", "task 1", "task 2"]
    losses = [[abs(a - b) for a, b in zip(o, r, strict=True)]
              for o, r in zip(ours["losses"], ref["losses"], strict=True)]
    ortho = [abs(a - b) for o, r in zip(ours["ortho"], ref["ortho"], strict=True)
             for a, b in zip(o, r, strict=True)]
    largest = max(abs(v) for o in ours["ortho"] for v in o)
    return {
        "ortho_term": {"largest": largest, "max_abs_diff": max(ortho)},
        "after": after,
        "max_abs_param": [max((ours["after"][k]["params"][n] - ref["after"][k]["params"][n])
                              .abs().max().item() for n in ours["after"][k]["params"])
                          for k in after],
        "max_abs_loss": [losses[0][0], max(losses[0]), max(losses[1])],
        "max_abs_logit": [(ours["after"][k]["logits"] - ref["after"][k]["logits"])
                          .abs().max().item() for k in after],
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
                old = ours["init"][task][name][:, :task * per].flatten(2)
                old = old / old.norm(dim=-1, keepdim=True)
                cos_ours = max(cos_ours, (a @ old.transpose(1, 2)).abs().max().item())
                cos_ref = max(cos_ref, (b @ old.transpose(1, 2)).abs().max().item())
        out.append({"max_abs_after_sign": diff, "sign_flipped": sum(flips) / len(flips),
                    "max_cos_old_ours": cos_ours, "max_cos_old_reference": cos_ref})
    return out


def step(copy: Path, work: Path) -> dict:
    ours, ref = _step_pair(copy, work, "qr")
    result = {**_differences(ours, ref), "bound": BOUND, "bound_why": BOUND_WHY}
    gs = _gram_schmidt(ours, ref)
    official = _differences(*_step_pair(copy, work, "official"))
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
        + " / ".join(f"{v:.1e}" for v in official["max_abs_param"]) + ", loss "
        + " / ".join(f"{v:.1e}" for v in official["max_abs_loss"]) + ", logits "
        + " / ".join(f"{v:.1e}" for v in official["max_abs_logit"]) + ".",
    ]
    result["gram_schmidt"] = gs
    result["official_rule"] = official
    return result


def _ours(work: Path, seed: int) -> dict:
    tree, weights = inputs(work)
    out = work / "ours"
    sets = ["scenario.init_cls=2", "scenario.increment=2", "scenario.class_order=natural",
            *(f"coda-prompt.{k}={SETTING[k]}" for k in
              ("epochs", "lr", "batch_size", "eval_batch_size"))]
    _run([sys.executable, "-m", "cl_bench", "run", "--methods", METHOD, "--scenario",
          "imagefolder", "--data-root", str(tree), "--backbone", "vit_tiny_patch16_224",
          "--image-size", str(SIZE), "--weights", str(weights), "--precision", "fp32",
          "--device", "cpu", *(a for s in sets for a in ("--set", s)), "--seeds", str(seed),
          "--out", str(out), "--no-progress"], REPO, _env(), work / f"ours-{seed}.log")
    found = sorted((out / "runs" / "imagefolder" / METHOD).glob(f"{seed}-*.json"),
                   key=lambda p: p.stat().st_mtime)
    run = json.loads(found[-1].read_text())
    return {"curve": run["acc_seen"],
            "just_learnt": [row[i] for i, row in enumerate(run["acc_matrix"])]}


def pilot_config(seed: int) -> dict:
    """PILOT's exps/coda_prompt.json with the parity dataset and the row's setting."""
    return {
        "prefix": "parity", "dataset": "parity", "memory_size": 0, "memory_per_class": 0,
        "fixed_memory": False, "shuffle": False, "init_cls": 2, "increment": 2,
        "model_name": "coda_prompt", "backbone_type": "vit_tiny_patch16_224_coda_prompt",
        "device": [-1], "seed": [seed], "tuned_epoch": SETTING["epochs"],
        "init_lr": SETTING["lr"], "batch_size": SETTING["batch_size"], "weight_decay": 0,
        "min_lr": 1e-5, "optimizer": "adam", "scheduler": "cosine",
        "reinit_optimizer": True, "pretrained": False, "drop": 0.0, "drop_path": 0.0,
        "prompt_param": [SETTING["pool_size"], SETTING["length"], SETTING["ortho_mu"]],
    }


def _numbers(text: str) -> list[float]:
    """The numbers of a printed list, bare or as numpy 2 prints them (np.float64(x))."""
    return [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?",
                                         text.replace("np.float64(", "("))]


def _parse(log: str) -> dict | None:
    """The accuracy curve and each task's accuracy right after it ('new' of the
    grouped accuracies) from PILOT's log; None unless every task is there."""
    curves = re.findall(r"CNN top1 curve: \[(.*)\]", log)
    new = re.findall(r"CNN: \{.*'new': (?:np\.float64\()?([\d.]+)", log)
    tasks = len(CLASSES) // 2
    if not curves or len(_numbers(curves[-1])) != tasks or len(new) != tasks:
        return None
    return {"curve": _numbers(curves[-1]), "just_learnt": [float(x) for x in new]}


def _reference(copy: Path, work: Path, seed: int) -> dict:
    """PILOT's main.py on this seed; a complete log of the same config is reused."""
    tree, weights = inputs(work)
    config = pilot_config(seed)
    log_path, done = work / f"reference-{seed}.log", work / f"reference-{seed}.json"
    if log_path.is_file() and done.is_file() and json.loads(done.read_text()) == config:
        parsed = _parse(log_path.read_text())
        if parsed is not None:
            return parsed
    path = copy / "exps" / f"parity_coda_prompt_seed{seed}.json"
    path.write_text(json.dumps(config, indent=1))
    log = _run([str(REF_PYTHON), "main.py", "--config", str(path)], copy,
               _env(PARITY_TREE=str(tree), PARITY_WEIGHTS=str(weights),
                    PARITY_IMG_SIZE=str(SIZE), PARITY_TEST_RESIZE="round",
                    PARITY_CLASS_ORDER=",".join(map(str, CLASS_ORDER))), log_path)
    parsed = _parse(log)
    if parsed is None:
        raise ParityError(f"no complete accuracy curve in {log_path}")
    done.write_text(json.dumps(config, indent=1))
    return parsed


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    return {"ours": _ours(work, seed), "reference": _reference(copy, work, seed)}
