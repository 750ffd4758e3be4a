"""Parity row: APER with adapters against LAMDA-PILOT's ``models/aper_adapter.py``
(shared setting and plumbing: bench/parity/first_session_rows.py).

The seeds are paired: each runs the step check's machinery for all five tasks at the
row's setting (``TRAIN``), with the seed's draws shared (cl-bench's initial adapters
and adaptation head, drawn after ``torch.manual_seed(seed)``, loaded into PILOT; the
first task's batch order, one permutation per epoch, drawn from the seed and read by
both sides), no augmentation, adapter dropout 0, fp32, one thread. Both sides' curves
come from their test logits.
"""

from __future__ import annotations

from pathlib import Path

from bench.parity import first_session_rows as fs

METHOD = "aper"
REFERENCE = {
    **fs.PILOT,
    "what": (
        "models/aper_adapter.py Learner (backbone parity_vit_tiny_adapter, "
        "patch_pilot_adapter_vit.py)"
    ),
}
PAIRING = "paired"
PAIRING_WHY = (
    "one seed fixes the same randomness on both sides, all there is: cl-bench's "
    "initial adapters and adaptation head (drawn after torch.manual_seed(seed)) "
    "are loaded into PILOT and the first task's batch order (one permutation per "
    "epoch) is drawn from the seed and read by both sides; no augmentation (the "
    "eval transform on both sides) and adapter dropout 0, so nothing else is "
    "drawn"
)
TASKS = 5
# the first-session adaptation at the step check's lr (NOTES: what it changes end to end)
TRAIN = {"epochs": fs.EPOCHS, "lr": 0.1}
SETTING = {
    **fs.SETTING,
    "method": f"adapt: adapter, {fs.EPOCHS} epochs (card: 20) at lr 0.1 (card: 0.01), "
    "else the card's defaults (PILOT exps/aper_aperpter.json: batch 48); "
    "adapter dropout 0 on both sides",
    "paired": "the step check's machinery for all five tasks: fixed tensors (eval "
    "transform: no augmentation), cl-bench's initial adapters and head in "
    "PILOT, the seed's batch order on both sides; PILOT's features rounded "
    "through fp16 as cl-bench's feature store keeps them",
}
CLASS_ORDER = fs.CLASS_ORDER
SEEDS = fs.SEEDS
NOTES = [
    f"Step check: {fs.STEP_EPOCHS} epochs at lr 0.1 (card 0.01, so that the adapters move), "
    "batch 48, the first task's 80 images in one fixed order per epoch, eval transform, "
    "adapter dropout 0 on both sides; cl-bench's initial adapters and head loaded into "
    "PILOT's network (bench/parity/drivers/pilot_first_session.py).",
    "per_seed[].{ours,reference}.learnt: top-1 on the newest task's test images right after "
    "it is trained, predicted among all seen classes (chance 1/2, 1/4, 1/6, 1/8, 1/10). "
    "per_seed[].max_abs_logit: the largest difference of the test logits over the five "
    "tasks.",
    "What the adaptation changes end to end here: little. On the random ViT-Tiny the frozen "
    "branch's half of APER's concatenated features decides the prototypes; over the 10 seeds "
    "the paired curves equal SimpleCIL's (bench/parity/results/simplecil.json, same tree, order"
    " and seeds) on 9, and on seed 2000 the adapted branch moves one test prediction at each of"
    " tasks 3-5 (task 3 learnt 51.7 % against 53.3 %). Probed on cl-bench's side for seed 1993 "
    "(the adaptation's loss falls from 0.69 to 0.33-0.53): lr 0.5 or 1.0 for 3 epochs, lr 0.1 "
    "for 10 epochs gave SimpleCIL's curve, lr 0.5 for 10 epochs moved only the last point (49.3"
    " against 50.0). So these seeds check the dual-branch prototype classifier on adapted "
    "features end to end, and the step check (every adapter tensor, fp16-rounded features, "
    "prototypes and logits, bound 2e-4) checks the adaptation itself.",
    "Before the seeds were paired (this file at commit 17ab38a: cl-bench run against "
    "PILOT's trainer, each side its own draws, crops, adapter dropout and batch order, the "
    "card's lr 0.01 for 3 epochs, Welch over the same 10 seeds): +0.00 [+0.00, +0.00] on "
    "both average and last, every seed SimpleCIL's curve on both sides: at that lr the "
    "adaptation changed no prediction, so those seeds checked only the dual-branch "
    "prototype classifier.",
]


def prepare(copy: Path) -> None:
    fs.prepare(copy)


def step(copy: Path, work: Path) -> dict:
    params = fs.card_params(METHOD, lr=0.1)
    check = fs.step_check(METHOD, copy, work, {}, params)
    return {**fs.summary(METHOD, check, work), "kept": [fs.KEPT_FP16]}


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    """Both sides on the step check's machinery for every task with the seed's draws
    shared (module docstring); each side's curve from its own test logits."""
    params = fs.card_params(METHOD, **TRAIN)
    run, init, _ = fs.ours_step(METHOD, work, params, seed, TASKS)
    ref = fs.pilot_step(METHOD, copy, work, {}, params, init, seed=seed, tasks=TASKS)
    keys = [f"task {t + 1}" for t in range(TASKS)]
    labels = fs.test_labels(work, params["epochs"], seed, TASKS)
    ours = [run[k]["logits"] for k in keys]
    theirs = [ref[k]["logits"] for k in keys]
    return {
        "ours": fs.accuracies(ours, labels),
        "reference": fs.accuracies(theirs, labels),
        "max_abs_logit": max(fs.max_abs(a, b) for a, b in zip(ours, theirs, strict=True)),
    }
