"""Parity row: SimpleCIL against LAMDA-PILOT's ``models/simplecil.py`` (shared setting and
plumbing: bench/parity/first_session_rows.py)."""

from __future__ import annotations

from pathlib import Path

from bench.parity import first_session_rows as fs

METHOD = "simplecil"
REFERENCE = {**fs.PILOT, "what": "models/simplecil.py Learner (backbone parity_vit_tiny)"}
PAIRING = "paired"
PAIRING_WHY = (
    "nothing is random after the class order: the prototypes of a frozen "
    "backbone are a function of the data, so a seed fixes the same (no) "
    "randomness on both sides"
)
SETTING = {**fs.SETTING, "method": "nothing trained; class-mean prototypes, cosine"}
CLASS_ORDER = fs.CLASS_ORDER
SEEDS = fs.SEEDS
STEP_NONE_WHY = (
    "SimpleCIL trains nothing: no optimizer step, no trainable tensor; its "
    "prototypes and logits are compared end to end (every seed, both sides)"
)


def prepare(copy: Path) -> None:
    fs.prepare(copy)


def step(copy: Path, work: Path) -> None:
    return None


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    return fs.run_seed(METHOD, copy, work, seed)
