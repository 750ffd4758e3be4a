"""Parity row of DualPrompt against LAMDA-PILOT's ``models/dualprompt.py`` (see
bench/parity/prompted.py for what is run on each side). The step check runs twice:
with the E-prompt split fixed on both sides (cl-bench ``reshape_bug: false``, PILOT
patched by bench/parity/patch_pilot_prompts.py with ``PARITY_RESHAPE_FIX=1``) and with PILOT's
split on both sides (``reshape_bug: true``, PILOT as published; LAMDA-PILOT issue 29)."""

from __future__ import annotations

from pathlib import Path

from bench.parity import prompted

METHOD = "dualprompt"
REFERENCE = {
    **prompted.PILOT,
    "what": "models/dualprompt.py Learner (backbone/prompt.py EPrompt, backbone/vit_dualprompt.py)",
}
PAIRING = "paired"
PAIRING_WHY = (
    "one seed fixes the same randomness on both sides: the paired runs are the "
    "step check's machinery for all three tasks at the row's epochs, lr and batch, "
    "with cl-bench's initial G-prompts, E-prompt pool, keys and head (drawn "
    "after torch.manual_seed(seed)) loaded into PILOT, one batch order drawn from "
    "the seed read by both sides, no augmentation, and the step check's attention "
    "arithmetic"
)
FIXED = {"PARITY_RESHAPE_FIX": "1"}
ROW = prompted.Row(
    method=METHOD,
    config="parity_dualprompt.json",
    size=64,
    ours={"epochs": 5, "lr": 0.02, "batch_size": 16, "eval_batch_size": 16},
    pilot={"tuned_epoch": 5, "init_lr": 0.02, "batch_size": 16},
    pilot_env=FIXED,
)
SETTING = ROW.setting()
CLASS_ORDER = prompted.CLASS_ORDER
SEEDS = list(range(1, 11))
VARIANTS = {
    "fixed split": ({"reshape_bug": False}, FIXED),
    "reshape_bug": ({"reshape_bug": True}, {}),
}
KEPT = [
    "E-prompt split: PILOT reshapes the gathered E-prompts (layers, key/value, batch, ...) "
    "to (layers, batch, key/value, ...) without the permute (LAMDA-PILOT issue 29); "
    "cl-bench's `reshape_bug: true` reproduces it (the 'reshape_bug' variant: PILOT as "
    "published against cl-bench with the switch on), `false` (default) is the fixed split",
]

OWN_WHY = (
    "Each side's own batch order and crops, measured: the step check (same batches, same "
    "attention arithmetic) finds the two sides equal to 1.2e-7, and a seed shares only the "
    "initial tensors and the class order. The control (bench/parity/prompted_control.py: "
    "PILOT again from each seed's initial tensors with the seed + 100, so that only its batch "
    "order and crops change) puts PILOT against itself at average +2.33 [-2.04, +6.70] and "
    "last +3.67 [-2.22, +9.55], as wide as cl-bench against PILOT (+0.69 [-3.99, +5.38], "
    "+3.17 [-1.18, +7.51]); the paired difference deviates by 6.1 / 8.2 points PILOT-PILOT "
    "and 6.5 / 6.1 cl-bench-PILOT. The same code fails the 'agrees' rule in this setting. "
    "cl-bench's last accuracy above PILOT's in 8 of the 10 seeds is within that spread: the "
    "reseeded PILOT's is above PILOT's in 7 of 10, by a mean as large, and cl-bench against "
    "the reseeded PILOT gives last -0.50 [-7.31, +6.32]."
)
NOTES = [
    "Own-randomness runs: each task right after training on it (`own.*.new_task`), lowest "
    "over the 10 seeds "
    "after tasks 1-3: cl-bench 76.7, 53.3, 63.3 %, PILOT 71.7, 43.3, 70.0 % (means 91.3, "
    "71.2, 87.5 and 92.3, 69.3, 86.2; chance 50, 25, 16.7 %): every task above chance on "
    "both sides in every seed; the closest, PILOT's task 2 at seed 3, 43.3 % against 25 %.",
    "The paired seeds use the fixed E-prompt split on both sides (cl-bench `reshape_bug: false`, "
    "PILOT with PARITY_RESHAPE_FIX=1, bench/parity/patch_pilot_prompts.py). PILOT as published is "
    "compared step by step against cl-bench with `reshape_bug: true` (the step check's "
    "'reshape_bug' variant): equal to round-off at this row's setting (largest gaps 1.2e-7, "
    "1.9e-9, 0 over step 1 and tasks 1-2), while the split itself (`reshape_bug_effect`: the fixed"
    " split against PILOT's on cl-bench's side, same batches) moves the tensors by up to 0.53, the"
    " loss by 0.21 and the test logits by 1.09 and changes 6.7 % of the test predictions after "
    "task 2.",
    "The control's reseeded PILOT (bench/parity/prompted_control.py) after tasks 1-3, "
    "lowest over the 10 seeds: 86.7, 40.0, 71.7 % right after training on each task (means "
    "94.7, 73.3, 85.7).",
    "Seed 1 was rerun on 2026-12-02: the earlier one had been drawn before commit 2ed87a0 "
    "(feature extraction no longer draws from the global generator), whose cold feature "
    "cache gave cl-bench other initial tensors; seeds 2-10 reproduced to the digit.",
    prompted.WHY_SETTING,
]


def prepare(copy: Path) -> None:
    prompted.prepare(copy)


def step(copy: Path, work: Path) -> dict:
    check = prompted.step_check(ROW, copy, work, VARIANTS)
    out = prompted.report(check, "fixed split", KEPT)
    out["reshape_bug_effect"] = prompted.gaps(
        check["records"]["fixed split"], check["records"]["reshape_bug"]
    )
    return out


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    return prompted.run_seed(ROW, copy, work, seed)


def extra(per_seed: list[dict]) -> dict:
    return {"own_randomness": prompted.own_randomness(per_seed, OWN_WHY)}
