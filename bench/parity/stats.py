"""The end-to-end half of a parity row: per-seed curves -> differences of average and
last accuracy with a 95 % interval, and the verdict rule of issue 22.

Average = mean of the accuracy curve (top-1 over all seen classes after each task),
last = its final point. Differences are ours - reference, in accuracy points.

``paired``: one seed fixes the same randomness on both sides, so the seeds pair the
runs: a t interval of the per-seed differences (n - 1 degrees of freedom).
``welch``: the sides draw their own randomness from the seed, so the runs are two
independent samples: Welch's interval for the difference of means, with the
Welch-Satterthwaite degrees of freedom.

Verdict: "agrees" when, for both average and last, the interval lies within +-1
point, or contains 0 and is narrower than 3 points; "differs" otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.stats import t as student_t

PAIRINGS = ("paired", "welch")
WITHIN = 1.0  # an interval inside [-1, 1] agrees
NARROW = 3.0  # an interval containing 0 agrees when narrower than this


def summary(curve: Sequence[float]) -> dict[str, float]:
    """Average and last accuracy of one curve."""
    if not curve:
        raise ValueError("an empty accuracy curve has no average or last accuracy")
    return {"avg": sum(curve) / len(curve), "last": float(curve[-1])}


def _mean_var(xs: Sequence[float]) -> tuple[float, float]:
    n = len(xs)
    mean = sum(xs) / n
    return mean, sum((x - mean) ** 2 for x in xs) / (n - 1)


def interval(ours: Sequence[float], ref: Sequence[float], pairing: str) -> dict:
    """Mean difference ours - ref and its 95 % interval [low, high]."""
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing {pairing!r} is not one of {PAIRINGS}")
    if len(ours) < 2 or len(ref) < 2:
        raise ValueError("an interval needs at least 2 seeds per side")
    if pairing == "paired":
        if len(ours) != len(ref):
            raise ValueError("paired seeds need the same number of runs on both sides")
        mean, var = _mean_var([a - b for a, b in zip(ours, ref, strict=True)])
        half = student_t.ppf(0.975, len(ours) - 1) * math.sqrt(var / len(ours))
    else:
        (m1, v1), (m2, v2) = _mean_var(ours), _mean_var(ref)
        s1, s2 = v1 / len(ours), v2 / len(ref)
        mean, se2 = m1 - m2, s1 + s2
        if se2 == 0.0:
            half = 0.0
        else:
            dof = se2**2 / (s1**2 / (len(ours) - 1) + s2**2 / (len(ref) - 1))
            half = student_t.ppf(0.975, dof) * math.sqrt(se2)
    return {"mean_diff": mean, "ci95": [mean - half, mean + half]}


def agrees(ci95: Sequence[float]) -> bool:
    """The issue's rule for one interval."""
    low, high = ci95
    inside = -WITHIN <= low and high <= WITHIN
    return inside or (low <= 0.0 <= high and high - low < NARROW)


def paired_block(per_seed: Sequence[dict], pairing: str, class_order: Sequence[int]) -> dict:
    """The results file's ``paired`` block from the per-seed curves."""
    sides = {
        side: [summary(run[side]["curve"]) for run in per_seed] for side in ("ours", "reference")
    }
    block: dict = {"n_seeds": len(per_seed), "pairing": pairing, "class_order": list(class_order)}
    for key in ("avg", "last"):
        block[key] = interval(
            [s[key] for s in sides["ours"]], [s[key] for s in sides["reference"]], pairing
        )
    return block


def verdict(paired: dict) -> str:
    return "agrees" if all(agrees(paired[k]["ci95"]) for k in ("avg", "last")) else "differs"
