"""The control of the L2P and DualPrompt rows' paired seeds: PILOT against PILOT.

    python -m bench.parity.prompted_control METHOD --scratch DIR

DIR is the scratch folder of a finished row (``python -m bench.parity METHOD --scratch
DIR``): its patched PILOT copy, each seed's initial tensors ``work/init_<seed>.pt`` and
its kept seeds' own-randomness runs (``own``). For every seed, PILOT runs end to end
again from the same initial tensors with the seed + :data:`OFFSET`, which gives it
another batch order and other crops and nothing else (the class order is fixed, the
tensors are loaded). The paired interval of (PILOT reseeded - PILOT) is what the row's
(cl-bench - PILOT) interval would be if the two sides were the same code: the spread
that one seed's own batch order and crops alone put between two paired runs. Finished
seeds are kept in ``DIR/control.json``; the answer is printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench.parity import stats
from bench.parity.__main__ import _kept, _seed_file, load_row
from bench.parity.methods import ParityError
from bench.parity.prompted import pilot_run

OFFSET = 100


def _sd_of_differences(a: list[float], b: list[float]) -> float:
    return statistics.stdev(x - y for x, y in zip(a, b, strict=True))


def control(row, scratch: Path) -> dict:
    """Every seed's reseeded PILOT run and the two paired intervals, per measure."""
    copy, work = scratch / "reference", scratch / "work"
    kept_path = scratch / "control.json"
    runs = json.loads(kept_path.read_text()) if kept_path.is_file() else {}
    rows = []
    for seed in row.SEEDS:
        paired = _kept(_seed_file(row, work, seed))
        if paired is None or not (work / f"init_{seed}.pt").is_file():
            raise ParityError(
                f"seed {seed} of {row.METHOD} is not finished in {scratch}; run "
                f"python -m bench.parity {row.METHOD} --scratch {scratch} first"
            )
        if str(seed) not in runs:
            runs[str(seed)] = pilot_run(
                row.ROW, copy, work, seed + OFFSET, work / f"init_{seed}.pt", name="control"
            )
            kept_path.write_text(json.dumps(runs))
        own = paired["own"]
        rows.append(
            {
                side: stats.summary(c)
                for side, c in (
                    ("ours", own["ours"]["curve"]),
                    ("reference", own["reference"]["curve"]),
                    ("reseeded", runs[str(seed)]["curve"]),
                )
            }
        )
    out: dict = {"offset": OFFSET, "seeds": list(row.SEEDS)}
    for key in ("avg", "last"):
        ours, ref, again = (
            [r[side][key] for r in rows] for side in ("ours", "reference", "reseeded")
        )
        out[key] = {
            "ours_minus_pilot": stats.interval(ours, ref, "paired"),
            "pilot_reseeded_minus_pilot": stats.interval(again, ref, "paired"),
            "sd_ours_minus_pilot": _sd_of_differences(ours, ref),
            "sd_reseeded_minus_pilot": _sd_of_differences(again, ref),
            "reseeded": again,
        }
    out["reseeded_new_task"] = [runs[str(s)]["new_task"] for s in row.SEEDS]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.parity.prompted_control",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("method", choices=("l2p", "dualprompt"))
    p.add_argument("--scratch", type=Path, required=True, help="the row's scratch folder")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        print(json.dumps(control(load_row(args.method), args.scratch), indent=1))
    except ParityError as e:
        print(f"bench.parity.prompted_control: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
