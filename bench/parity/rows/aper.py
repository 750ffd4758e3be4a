"""Parity row: APER with adapters against LAMDA-PILOT's ``models/aper_adapter.py``
(shared setting and plumbing: bench/parity/first_session_rows.py)."""

from __future__ import annotations

from pathlib import Path

from bench.parity import first_session_rows as fs

METHOD = "aper"
REFERENCE = {**fs.PILOT, "what": "models/aper_adapter.py Learner (backbone "
                                 "parity_vit_tiny_adapter, patch_pa.py)"}
PAIRING = "welch"
PAIRING_WHY = ("a seed does not fix the same randomness on both sides: the adapter and "
               "head inits, the batch order, the crops and the adapter dropout are drawn "
               "from each toolbox's own generator in its own sequence")
SETTING = {**fs.SETTING, "method": f"adapt: adapter, {fs.EPOCHS} epochs (card: 20), else "
                                   "the card's defaults (PILOT exps/aper_aperpter.json)"}
CLASS_ORDER = fs.CLASS_ORDER
SEEDS = fs.SEEDS
NOTES = [
    f"Step check: {fs.STEP_EPOCHS} epochs at lr 0.1 (card 0.01, so that the adapters move), "
    "batch 48, the first task's 80 images in one fixed order per epoch, eval transform, "
    "adapter dropout 0 on both sides; cl-bench's initial adapters and head loaded into "
    "PILOT's network (bench/parity/drivers/pilot_first_session.py).",
    f"End to end the adaptation ({fs.EPOCHS} epochs at the card's lr 0.01 on a random "
    "ViT-Tiny) changes no prediction: both sides give SimpleCIL's curve on every seed, so "
    "the seeds check the dual-branch prototype classifier, and the step check (adapters "
    "compared tensor by tensor at lr 0.1) checks the adaptation.",
]


def prepare(copy: Path) -> None:
    fs.prepare(copy)


def step(copy: Path, work: Path) -> dict:
    params = fs.card_params(METHOD, lr=0.1)
    check = fs.step_check(METHOD, copy, work, {}, params)
    return {**fs.summary(METHOD, check, work), "kept": [fs.KEPT_FP16]}


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    return fs.run_seed(METHOD, copy, work, seed)
