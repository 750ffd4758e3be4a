"""Parity row of EASE (cl_bench/strategies/ease.py) against LAMDA-PILOT's
``models/ease.py`` (with ``backbone/vit_ease.py``, ``backbone/linears.py``
``EaseCosineLinear``, ``utils/inc_net.py`` ``EaseNet``) at commit 2647455, patched by
bench/parity/patch_pilot.py and patch_pilot_ease_mos.py; the setting, the step check and the
end-to-end runs are bench/parity/adapter_rows.py's.

Step check: each task's fresh adapter set and proxy classifier are exported from
cl-bench into PILOT; the test logits are compared after the prototypes are set, the
old classes completed in the new subspace and the subspaces reweighted.

Paired seeds: the step check's machinery for all three tasks at the row's epochs, lr
and batch (``adapter_rows.TRAIN``), so one seed fixes the same randomness on both
sides. The earlier comparison of the two sides left to their own randomness is in
``NOTES``.
"""

from __future__ import annotations

from pathlib import Path

from bench.parity import adapter_rows as shared

METHOD = "ease"
REFERENCE = {
    "repo": shared.REFERENCE_REPO,
    "commit": shared.REFERENCE_COMMIT,
    "what": "models/ease.py Learner (EASE) on backbone/vit_ease.py as ViT-Tiny",
}
PAIRING = "paired"
PAIRING_WHY = shared.PAIRED_WHY
SETTING = shared.setting(METHOD)
CLASS_ORDER = shared.CLASS_ORDER
SEEDS = shared.SEEDS
NOTES = [
    shared.PAIRED_NOTE,
    "Before the seeds were paired (this file at commit 17ab38a: cl-bench run against "
    "PILOT's trainer, each side its own draws of the adapters and proxy, batch order, "
    "crops, flips and dropout, augmentation on, Welch over the same 10 seeds): average "
    "-0.04 [-0.25, +0.17], last +0.06 [-0.44, +0.56] (agrees).",
]
BOUND = 1e-5
BOUND_WHY = (
    "float32 round-off: the same functions through different kernels and "
    "summation orders (timm 1.0's fused attention on the qkv block vs PILOT's "
    "explicit softmax(QK^T)V on split q/k/v projections; prototypes summed in "
    "another order); eps 1.2e-7 on values of order 1 through 12 blocks and a few "
    "SGD steps stays within about 100 eps (measured: below 1e-6). A rule "
    "difference shows far above it: MOS's official per-forward merge, a few SGD "
    "steps into task 2, moves the tensors by about 1e-3 (the MOS row's kept entry)"
)


def prepare(copy: Path) -> None:
    shared.prepare(copy)


def step(copy: Path, work: Path) -> dict:
    seed = SEEDS[0]
    ours = shared.ours_step(METHOD, work, seed)
    ref = shared.run_pilot(
        copy, work, shared.step_specs(copy, METHOD, work, seed, ours), "ease_step"
    )
    return {**shared.differences(ours, ref), "bound": BOUND, "bound_why": BOUND_WHY, "kept": []}


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    return shared.paired_seed(METHOD, copy, work, seed)
