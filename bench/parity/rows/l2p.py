"""Parity row of L2P against LAMDA-PILOT's ``models/l2p.py`` (see
bench/parity/prompted.py for what is run on each side)."""

from __future__ import annotations

from pathlib import Path

from bench.parity import prompted

METHOD = "l2p"
REFERENCE = {**prompted.PILOT,
             "what": "models/l2p.py Learner (backbone/prompt.py Prompt, backbone/vit_l2p.py)"}
PAIRING = "paired"
PAIRING_WHY = ("one seed gives both sides the same initial prompt pool, keys and head "
               "(cl-bench's, written into PILOT before training) and the same class order; "
               "each side draws its own batch order and crops")
ROW = prompted.Row(
    method=METHOD, config="parity_l2p.json", size=64,
    ours={"epochs": 5, "lr": 0.001875, "batch_size": 16, "eval_batch_size": 16},
    pilot={"tuned_epoch": 5, "init_lr": 0.001875, "batch_size": 16})
SETTING = ROW.setting()
CLASS_ORDER = prompted.CLASS_ORDER
SEEDS = list(range(1, 11))
KEPT = [
    "prompt position: PILOT adds the [CLS] position entry to every prompt token, cl-bench "
    "none (cl_bench/backbones/prompted.py); the same function when PILOT's initial prompts "
    "are cl-bench's minus that frozen entry, which the step check does, so it shows the "
    "models equal; from the same random draw the two start that entry (~0.02) apart",
]

DIFFERS_WHY = prompted.DIFFERS_WHY
NOTES = [
    prompted.WHY_LR,
]


def prepare(copy: Path) -> None:
    prompted.prepare(copy)


def step(copy: Path, work: Path) -> dict:
    check = prompted.step_check(ROW, copy, work, {"l2p": ({}, {})})
    return prompted.report(check, "l2p", KEPT)


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    return prompted.run_seed(ROW, copy, work, seed)
