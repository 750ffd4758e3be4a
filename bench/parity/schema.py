"""The parity results file (``bench/parity/results/METHOD.json``): what it must hold,
and a check that a file read back holds it (the tables are generated from these files,
so a damaged or incomplete one is refused, never rendered)."""

from __future__ import annotations

import json
import math
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
AFTER = ["step 1", "task 1", "task 2"]
STEP_KEYS = ("max_abs_param", "max_abs_loss", "max_abs_logit")
MIN_SEEDS = 10


class ResultsError(ValueError):
    """A results file is missing a key or holds a value of the wrong kind."""


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise ResultsError(f"{where}: {what}")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_step(step, where: str) -> None:
    _need(isinstance(step, dict), where, "'step' is neither null nor an object")
    _need(step.get("after") == AFTER, where, f"step 'after' is not {AFTER}")
    for key in STEP_KEYS:
        vals = step.get(key)
        _need(
            isinstance(vals, list)
            and len(vals) == len(AFTER)
            and all(_number(v) and v >= 0 for v in vals),
            where,
            f"step '{key}' is not {len(AFTER)} non-negative numbers",
        )
    _need(_number(step.get("bound")) and step["bound"] > 0, where, "step 'bound' is not > 0")
    _need(
        isinstance(step.get("bound_why"), str) and step["bound_why"],
        where,
        "step 'bound_why' is empty",
    )
    _need(isinstance(step.get("kept"), list), where, "step 'kept' is not a list")


def check_paired(paired, per_seed, where: str) -> None:
    _need(isinstance(paired, dict), where, "'paired' is not an object")
    _need(paired.get("pairing") in ("paired", "welch"), where, "unknown 'pairing'")
    _need(isinstance(paired.get("class_order"), list), where, "'class_order' is not a list")
    _need(
        paired.get("n_seeds") == len(per_seed) >= MIN_SEEDS,
        where,
        f"'n_seeds' is not the number of per-seed runs, at least {MIN_SEEDS}",
    )
    for key in ("avg", "last"):
        block = paired.get(key, {})
        ci = block.get("ci95")
        _need(
            _number(block.get("mean_diff"))
            and isinstance(ci, list)
            and len(ci) == 2
            and all(_number(v) for v in ci)
            and ci[0] <= block["mean_diff"] <= ci[1],
            where,
            f"'paired.{key}' is not a mean difference inside its interval",
        )
    for run in per_seed:
        _need(isinstance(run.get("seed"), int), where, "a per-seed run without its seed")
        for side in ("ours", "reference"):
            curve = run.get(side, {}).get("curve")
            _need(
                isinstance(curve, list) and curve and all(_number(v) for v in curve),
                where,
                f"seed {run.get('seed')}: '{side}.curve' is not a list of numbers",
            )


def check(data: dict, where: str) -> None:
    """Refuse a results dict that lacks what the tables and issue 22 need."""
    _need(isinstance(data, dict), where, "not a JSON object")
    _need(isinstance(data.get("method"), str), where, "no 'method'")
    ref = data.get("reference", {})
    _need(
        isinstance(ref.get("repo"), str)
        and isinstance(ref.get("commit"), str)
        and len(ref["commit"]) == 40,
        where,
        "'reference' needs 'repo' and a 40-digit 'commit'",
    )
    if data.get("step") is None:
        _need(
            isinstance(data.get("step_none_why"), str),
            where,
            "'step' is null without 'step_none_why'",
        )
    else:
        check_step(data["step"], where)
    per_seed = data.get("per_seed")
    _need(isinstance(per_seed, list), where, "'per_seed' is not a list")
    check_paired(data.get("paired"), per_seed, where)
    _need(data.get("verdict") in ("agrees", "differs"), where, "'verdict' is not agrees|differs")
    if data["verdict"] == "differs":
        _need(
            isinstance(data.get("why"), str) and data["why"],
            where,
            "a 'differs' verdict without 'why'",
        )


def load(path: Path) -> dict:
    """Read and check one results file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ResultsError(f"{path}: cannot be read as JSON ({e})") from None
    check(data, str(path))
    return data


def load_all(folder: Path = RESULTS) -> list[dict]:
    return [load(p) for p in sorted(Path(folder).glob("*.json"))]
