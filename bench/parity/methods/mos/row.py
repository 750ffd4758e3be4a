"""Parity row of MOS (cl_bench/strategies/mos.py) against LAMDA-PILOT's
``models/mos.py`` (with ``backbone/vit_mos.py``, ``utils/inc_net.py`` ``MOSNet``) at
commit 2647455, patched by bench/parity/patch_pilot.py and patch_pilot_ease_mos.py; the setting,
the step check and the end-to-end runs are bench/parity/adapter_rows.py's.

Merge rule: PILOT's ``reweight_adapter`` merges the adapter toward the mean of the
earlier ones inside every forward, in place (methods/mos.yaml, first departure);
cl-bench merges once after every optimizer step, as the paper says, and has no switch
for the official rule. The step check and the end-to-end runs compare cl-bench with
PILOT patched to cl-bench's rule (``PARITY_MOS_MERGE=paper``, patch_pilot_ease_mos.py); the step
check also runs PILOT as published and reports that gap under ``kept``. The
classifier alignment's Gaussian samples and permutations are shared in the step
check: both sides seed the global generator before it and draw the same normals in
the same order (one (240, d) block per class).

Paired seeds: the step check's machinery for all three tasks at the row's epochs, lr
and batch (``adapter_rows.TRAIN``), against PILOT with the paper's merge rule, so one
seed fixes the same randomness on both sides. The earlier comparison of the two sides
left to their own randomness is in ``NOTES``.
"""

from __future__ import annotations

from pathlib import Path

from bench.parity import adapter_rows as shared
from bench.parity.methods.ease.row import BOUND, BOUND_WHY

METHOD = "mos"
REFERENCE = {
    "repo": shared.REFERENCE_REPO,
    "commit": shared.REFERENCE_COMMIT,
    "what": "models/mos.py Learner (MOS) on backbone/vit_mos.py as ViT-Tiny, "
    "merge rule patched to the paper's (PARITY_MOS_MERGE=paper)",
}
PAIRING = "paired"
PAIRING_WHY = shared.PAIRED_WHY
SETTING = {**shared.setting(METHOD), "reference_merge": "PARITY_MOS_MERGE=paper"}
CLASS_ORDER = shared.CLASS_ORDER
SEEDS = shared.SEEDS
NOTES = [
    shared.PAIRED_NOTE,
    "Before the seeds were paired (this file at commit 17ab38a: cl-bench run against "
    "PILOT's trainer with the paper's merge rule, each side its own draws of the adapters "
    "and head, batch order, crops, flips, dropout and the alignment's Gaussian samples, "
    "augmentation on, Welch): over 15 seeds average +0.36 [-0.92, +1.63], last -0.15 "
    "[-0.67, +0.37] (agrees); over the first 10 average +0.26 [-1.33, +1.85], 3.19 points "
    "wide, the first task's seed-to-seed spread (its accuracy's SD 2.74 points on "
    "cl-bench's side, 6.09 on PILOT's, where one PILOT seed learnt task 1 to 78.3 %).",
]
PAPER = {"PARITY_MOS_MERGE": "paper"}


def prepare(copy: Path) -> None:
    shared.prepare(copy)


def official_gap(diff: dict) -> str:
    numbers = "; ".join(
        f"{point}: param {param:.2g}, loss {loss:.2g}, logit {logit:.2g}"
        for point, param, loss, logit in zip(
            diff["after"],
            diff["max_abs_param"],
            diff["max_abs_loss"],
            diff["max_abs_logit"],
            strict=True,
        )
    )
    return (
        "MOS merge rule: PILOT as published merges the adapter toward the mean of the "
        "earlier adapters inside every forward (once per block, in place, also at "
        "test time on the stored adapters and while the class statistics are taken); "
        "cl-bench merges once after every optimizer step (the paper) and has no card "
        "switch for the official rule (methods/mos.yaml). Against PILOT as published: "
        f"{numbers}"
    )


def step(copy: Path, work: Path) -> dict:
    seed = SEEDS[0]
    ours = shared.ours_step(METHOD, work, seed)
    spec = shared.step_specs(copy, METHOD, work, seed, ours)
    paper = shared.run_pilot(copy, work, spec, "mos_step_paper", PAPER)
    official = shared.run_pilot(copy, work, spec, "mos_step_official")
    return {
        **shared.differences(ours, paper),
        "bound": BOUND,
        "bound_why": BOUND_WHY,
        "kept": [official_gap(shared.differences(ours, official))],
    }


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    return shared.paired_seed(METHOD, copy, work, seed, env=PAPER)
