"""Parity row of MOS (cl_bench/strategies/mos.py) against LAMDA-PILOT's
``models/mos.py`` (with ``backbone/vit_mos.py``, ``utils/inc_net.py`` ``MOSNet``) at
commit 2647455, patched by bench/parity/patch_pilot.py and patch_pb.py; the setting,
the step check and the end-to-end runs are bench/parity/adapter_rows.py's.

Merge rule: PILOT's ``reweight_adapter`` merges the adapter toward the mean of the
earlier ones inside every forward, in place (methods/mos.yaml, first departure);
cl-bench merges once after every optimizer step, as the paper says, and has no switch
for the official rule. The step check and the end-to-end runs compare cl-bench with
PILOT patched to cl-bench's rule (``PARITY_MOS_MERGE=paper``, patch_pb.py); the step
check also runs PILOT as published and reports that gap under ``kept``. The
classifier alignment's Gaussian samples and permutations are shared in the step
check: both sides seed the global generator before it and draw the same normals in
the same order (one (240, d) block per class).
"""

from __future__ import annotations

from pathlib import Path

from bench.parity import adapter_rows as shared
from bench.parity.rows.ease import BOUND, BOUND_WHY

METHOD = "mos"
REFERENCE = {"repo": shared.REFERENCE_REPO, "commit": shared.REFERENCE_COMMIT,
             "what": "models/mos.py Learner (MOS) on backbone/vit_mos.py as ViT-Tiny, "
                     "merge rule patched to the paper's (PARITY_MOS_MERGE=paper)"}
PAIRING = "welch"
PAIRING_WHY = ("a seed fixes each side's own generator streams (adapter and head init, "
               "batch order, crops, flips, dropout, the alignment's Gaussian samples), "
               "which the two toolboxes draw in a different order: no randomness is "
               "shared end to end")
SETTING = {**shared.setting(METHOD), "reference_merge": "PARITY_MOS_MERGE=paper"}
CLASS_ORDER = shared.CLASS_ORDER
# 15 seeds, not the rows' 10: at 10 the average's interval was 3.19 points wide, centred
# (+0.26), its width the first task's spread (DIFFERS_WHY); the 5 more seeds were added
# after that measurement, and both counts are reported in NOTES.
SEEDS = list(range(1, 16))
NOTES = [
    "Seeds: 15. The first 10 (seeds 1-10) gave average +0.26 [-1.33, +1.85], last -0.22 "
    "[-0.84, +0.39] (Welch): centred, but the average's interval 3.19 points wide, over the "
    "3-point limit; seeds 11-15 were added after that measurement.",
]
PAPER = {"PARITY_MOS_MERGE": "paper"}
DIFFERS_WHY = (
    "No systematic difference; the average accuracy's interval is too wide, not off "
    "center. The mean differences are +0.26 (average) and -0.22 points (last, interval "
    "[-0.84, 0.39], within +-1), but the average's Welch interval [-1.33, 1.85] is 3.19 "
    "points wide, over the 3-point limit. Its width is the first task's seed-to-seed "
    "spread, which the average counts once in three: task-1 accuracy SD 2.74 (cl-bench) "
    "and 6.09 points (PILOT), where tasks 2 and 3 (the last) vary by 0.5-0.8; one PILOT "
    "seed (10) learnt task 1 to 78.3 % (all other seeds of both sides 91.7-100 %), its "
    "linear head trained at lr x 0.1 on the random ViT's features (seed 10 was the slow "
    "seed in the earlier probes too). Measured on the kept seeds: without seed 10 the "
    "average's interval is [-1.51, 0.54] (agrees), the last's [-0.89, 0.40]; the task-2 "
    "curve point agrees at [-0.64, 0.64]. The step check, which shares the randomness, "
    "is equal to float32 round-off.")


def prepare(copy: Path) -> None:
    shared.prepare(copy)


def official_gap(diff: dict) -> str:
    numbers = "; ".join(
        f"{point}: param {param:.2g}, loss {loss:.2g}, logit {logit:.2g}"
        for point, param, loss, logit in zip(diff["after"], diff["max_abs_param"],
                                             diff["max_abs_loss"], diff["max_abs_logit"],
                                             strict=True))
    return ("MOS merge rule: PILOT as published merges the adapter toward the mean of the "
            "earlier adapters inside every forward (once per block, in place, also at "
            "test time on the stored adapters and while the class statistics are taken); "
            "cl-bench merges once after every optimizer step (the paper) and has no card "
            "switch for the official rule (methods/mos.yaml). Against PILOT as published: "
            f"{numbers}")


def step(copy: Path, work: Path) -> dict:
    seed = SEEDS[0]
    ours = shared.ours_step(METHOD, work, seed)
    spec = shared.step_specs(copy, METHOD, work, seed, ours)
    paper = shared.run_pilot(copy, work, spec, "mos_step_paper", PAPER)
    official = shared.run_pilot(copy, work, spec, "mos_step_official")
    return {**shared.differences(ours, paper), "bound": BOUND, "bound_why": BOUND_WHY,
            "kept": [official_gap(shared.differences(ours, official))]}


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    return shared.run_seed(METHOD, copy, work, seed, PAPER)
