"""Run one parity row: both sides, step by step and end to end on paired seeds.

    python -m bench.parity METHOD --reference DIR [--seeds N] [--scratch DIR] [--only step]

DIR is a local checkout of the row's reference repository at the commit the row pins
(``bench/parity/methods/METHOD/row.py``, ``REFERENCE``). Its files at that commit are copied
into a scratch folder outside this repository and patched there; DIR itself is never
changed. The results go to ``bench/parity/results/METHOD.json`` (written atomically,
only for a full row: every seed of the row); then ``python -m bench.parity.render``
regenerates ``bench/parity.md`` from all results files.

Each finished seed is kept in the scratch folder, so an interrupted row resumes where
it stopped; ``--fresh`` forgets them.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from bench.parity import schema, stats
from bench.parity.methods import ParityError
from cl_bench.store.atomic import replace_atomically

REPO = Path(__file__).resolve().parents[2]
METHODS = Path(__file__).resolve().parent / "methods"


def rows() -> list[str]:
    return sorted(p.parent.name.replace("_", "-") for p in METHODS.glob("*/row.py"))


def load_row(method: str):
    if method not in rows():
        raise ParityError(
            f"no parity row for method {method!r}; rows: {', '.join(rows())} "
            f"(bench/parity/methods/<method>/row.py)"
        )
    return importlib.import_module(f"bench.parity.methods.{method.replace('-', '_')}.row")


def _inside_repo(path: Path) -> bool:
    return path.resolve().is_relative_to(REPO)


def checked_commit(row, reference: Path) -> str:
    """The commit of the checkout DIR, refused unless it is the row's pinned one."""
    want = row.REFERENCE["commit"]
    if not reference.is_dir():
        raise ParityError(
            f"--reference {reference} is not a folder; clone "
            f"github.com/{row.REFERENCE['repo']} and check out {want}"
        )
    if hasattr(row, "reference_commit"):
        got = row.reference_commit(reference)
    else:
        done = subprocess.run(
            ["git", "-C", str(reference), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        if done.returncode != 0:
            said = done.stderr.strip()
            raise ParityError(
                f"--reference {reference} is not a git checkout ({said}); "
                f"clone github.com/{row.REFERENCE['repo']} and check out {want}"
            )
        got = done.stdout.strip()
    if got != want:
        raise ParityError(
            f"--reference {reference} is at commit {got}, the row pins {want}: "
            f"run `git -C {reference} checkout {want}`"
        )
    return got


def scratch_copy(row, reference: Path, scratch: Path) -> Path:
    """The reference's files at the pinned commit, fresh, in scratch/reference."""
    copy = scratch / "reference"
    if copy.exists():
        shutil.rmtree(copy)
    copy.mkdir(parents=True)
    if hasattr(row, "copy_reference"):
        row.copy_reference(reference, copy)
        return copy
    archive = subprocess.run(
        ["git", "-C", str(reference), "archive", row.REFERENCE["commit"]],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
    return copy


def code_digest() -> str:
    """A digest of the code a seed's curves come from: every Python file of bench/parity
    and cl_bench, and every method card."""
    sha = hashlib.sha256()
    files = [
        *(REPO / "bench" / "parity").rglob("*.py"),
        *(REPO / "cl_bench").rglob("*.py"),
        *(REPO / "methods").glob("*.yaml"),
    ]
    for path in sorted(files):
        sha.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()[:12]


def _seed_file(row, work: Path, seed: int) -> Path:
    """Where a finished seed is kept: keyed by the row's setting, order and reference and
    by the code (:func:`code_digest`), so that a changed row or changed code never reuses
    curves another setting or another version computed."""
    key = json.dumps([row.SETTING, row.CLASS_ORDER, row.REFERENCE, code_digest()], sort_keys=True)
    return work / "seeds" / hashlib.sha256(key.encode()).hexdigest()[:12] / f"{seed}.json"


def _kept(path: Path) -> dict | None:
    """A finished seed read back, or None when it is absent or damaged (recomputed)."""
    try:
        run = json.loads(path.read_text())
        for side in ("ours", "reference"):
            if not run[side]["curve"]:
                return None
        return run
    except (OSError, ValueError, KeyError, TypeError):
        return None


def run_seeds(row, copy: Path, work: Path, seeds: list[int]) -> list[dict]:
    """Every seed's curves, reusing those a previous (interrupted) call finished."""
    runs = []
    for i, seed in enumerate(seeds, 1):
        kept = _seed_file(row, work, seed)
        run = _kept(kept)
        if run is not None:
            print(f"  seed {seed} ({i}/{len(seeds)}): kept from an earlier run", flush=True)
        else:
            t0 = time.perf_counter()
            run = {"seed": seed, **row.run_seed(copy, work, seed)}
            run["seconds"] = round(time.perf_counter() - t0, 1)
            replace_atomically(kept, lambda f, r=run: json.dump(r, f))
            print(f"  seed {seed} ({i}/{len(seeds)}): {run['seconds']} s", flush=True)
        for side in ("ours", "reference"):
            run[side].update(stats.summary(run[side]["curve"]))
        runs.append(run)
    return runs


def assemble(row, step, per_seed: list[dict], seconds: float, step_seconds: float = 0.0) -> dict:
    """The results file. ``measured.seconds``: this call's wall time (seeds kept from an
    earlier call cost it nothing); ``measured.row_seconds``: what the row costs from
    scratch, the step check of this call plus every seed's own time when it ran."""
    paired = stats.paired_block(per_seed, row.PAIRING, row.CLASS_ORDER)
    paired["pairing_why"] = row.PAIRING_WHY
    data = {
        "method": row.METHOD,
        "reference": dict(row.REFERENCE),
        "setting": row.SETTING,
        "step": step,
        "paired": paired,
        "verdict": stats.verdict(paired),
        "per_seed": per_seed,
        "command": f"python -m bench.parity {row.METHOD} --reference DIR",
        "measured": {
            "date": date.today().isoformat(),
            "seconds": round(seconds),
            "row_seconds": round(step_seconds + sum(r.get("seconds", 0.0) for r in per_seed)),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(),
        },
    }
    if step is None:
        data["step_none_why"] = row.STEP_NONE_WHY
    else:
        data["step"]["within_bound"] = all(
            v <= step["bound"] for k in schema.STEP_KEYS for v in step[k]
        )
    if data["verdict"] == "differs":
        data["why"] = getattr(row, "DIFFERS_WHY", "")
    if getattr(row, "NOTES", None):
        data["notes"] = list(row.NOTES)
    if hasattr(row, "extra"):
        data.update({k: v for k, v in row.extra(per_seed).items() if k not in data})
    return data


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.parity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("method", help=f"one of: {', '.join(rows())}")
    p.add_argument(
        "--reference",
        type=Path,
        required=True,
        help="a checkout of the row's reference repository at its pinned commit",
    )
    p.add_argument(
        "--scratch",
        type=Path,
        default=None,
        help="scratch folder outside the repository (default: $TMPDIR/cl-bench-parity/METHOD)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="run only the first N of the row's seeds (a trial: no results file)",
    )
    p.add_argument(
        "--only",
        choices=("step",),
        default=None,
        help="run the step check alone and print it (no results file)",
    )
    p.add_argument("--fresh", action="store_true", help="forget finished seeds in the scratch")
    p.add_argument("--out", type=Path, default=schema.RESULTS, help="results folder")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        row = load_row(args.method)
        scratch = args.scratch or Path(tempfile.gettempdir()) / "cl-bench-parity" / row.METHOD
        if _inside_repo(scratch):
            raise ParityError(
                f"--scratch {scratch} is inside the repository; the reference's "
                f"code must never land there: give a folder outside {REPO}"
            )
        checked_commit(row, args.reference.resolve())
        copy = scratch_copy(row, args.reference.resolve(), scratch)
        work = scratch / "work"
        if args.fresh and (work / "seeds").exists():
            shutil.rmtree(work / "seeds")
        work.mkdir(parents=True, exist_ok=True)
        row.prepare(copy)
        print(f"{row.METHOD}: step check", flush=True)
        t_step = time.perf_counter()
        step = row.step(copy, work)
        t_step = time.perf_counter() - t_step
        print(json.dumps(step, indent=1), flush=True)
        if args.only == "step":
            return 0
        seeds = list(row.SEEDS)[: args.seeds] if args.seeds else list(row.SEEDS)
        print(f"{row.METHOD}: {len(seeds)} seeds, class order {row.CLASS_ORDER}", flush=True)
        per_seed = run_seeds(row, copy, work, seeds)
        if len(per_seed) < 2:
            print(
                "a trial of one seed: no interval (it needs two seeds per side) and no "
                "results file written"
            )
            return 0
        data = assemble(row, step, per_seed, time.perf_counter() - t0, t_step)
        print(json.dumps({k: data[k] for k in ("paired", "verdict")}, indent=1))
        if args.seeds:
            print("a trial with --seeds: no results file written")
            return 0
        schema.check(data, row.METHOD)
        target = args.out / f"{row.METHOD}.json"
        replace_atomically(target, lambda f: f.write(json.dumps(data, indent=1) + "\n"))
        print(f"written {target}; regenerate the tables: python -m bench.parity.render")
        return 0
    except (ParityError, schema.ResultsError) as e:
        print(f"bench.parity: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
