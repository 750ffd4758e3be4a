"""``python -m bench.gpu_check [--out FILE] [--commit HASH] [--cpu-dry-run]``: see the
package docstring. The JSON is a measurement of figure ``gpu-check``
(``bench/measurements.py``: date, the GPU and its host CPU, precision, commit, the table's
rows as its headline), so the documentation's Performance page shows it once committed."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS starts

import torch  # noqa: E402

from bench import measurements  # noqa: E402
from bench.gpu_check import sizes as sizes_of  # noqa: E402
from bench.gpu_check.report import rows, table  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results"
NO_GPU = (
    "bench.gpu_check measures a CUDA GPU, and PyTorch sees none here "
    "(torch.cuda.is_available() is False). Run it on a machine with an NVIDIA GPU, "
    "after `make setup`, as `.venv/bin/python -m bench.gpu_check`; `cl-bench run "
    "--device auto` on this machine says why a present GPU cannot be used. To check "
    "the script itself on a CPU, add --cpu-dry-run (toy sizes, no GPU figures)."
)


def parts(sizes, device: torch.device, work: Path) -> dict:
    """Name -> a call of each part; imported here so that the refusal is instant."""
    from bench.gpu_check.agreement import agreement
    from bench.gpu_check.determinism import determinism
    from bench.gpu_check.extraction import extraction
    from bench.gpu_check.machine import machine
    from bench.gpu_check.methods import methods

    return {
        "machine": lambda: machine(device),
        "extraction": lambda: extraction(sizes, device),
        "methods": lambda: methods(sizes, device, work),
        "agreement": lambda: agreement(sizes, device, work),
        "determinism": lambda: determinism(sizes, device),
    }


def check(dry_run: bool) -> dict:
    """Every part, each timed; a part that fails is recorded with its error and the
    others still run, so one broken part costs its figures only."""
    sizes = sizes_of.DRY if dry_run else sizes_of.GPU
    device = torch.device("cpu" if dry_run else "cuda")
    out: dict = {
        "dry_run": dry_run,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sizes": sizes.__dict__,
        "seconds": {},
        "errors": {},
    }
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        os.environ["CL_BENCH_CACHE"] = str(Path(tmp) / "cache")
        for name, run in parts(sizes, device, Path(tmp)).items():
            t0 = time.perf_counter()
            print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
            try:
                out[name] = run()
            except Exception as e:  # recorded, the other parts go on
                out["errors"][name] = "".join(traceback.format_exception_only(e)).strip()
                traceback.print_exc()
            out["seconds"][name] = time.perf_counter() - t0
    return out


def gpu_slug(found: dict) -> str:
    return (found.get("machine", {}).get("gpu") or "cpu").replace(" ", "-").lower()


def default_out(found: dict) -> Path:
    """bench/results/ for a GPU's figures; the system's temporary folder for a dry run,
    whose toy figures are not a measurement to commit."""
    folder = Path(tempfile.gettempdir()) if found["dry_run"] else RESULTS
    return folder / f"gpu-check-{time.strftime('%Y-%m-%d')}-{gpu_slug(found)}.json"


def as_measurement(found: dict, commit: str | None) -> dict:
    m = found.get("machine", {})
    device = (
        f"{m.get('gpu')} ({m.get('arch')}) GPU" if m.get("gpu") else "no GPU (a dry run on the CPU)"
    )
    note = "a dry run at toy sizes: checks the script, measures nothing" if found["dry_run"] else ""
    return measurements.record(
        "gpu-check",
        [(f"{part}: {what}", measured) for part, what, measured in rows(found)],
        found,
        "bf16, fp32",
        "python -m bench.gpu_check" + (" --cpu-dry-run" * found["dry_run"]),
        note=note,
        cpu=f"{device}; host {measurements.cpu_description()}",
        commit=commit,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        help="the JSON to write (default: "
        "bench/results/gpu-check-<date>-<gpu>.json; a dry run's goes to the "
        "temporary folder)",
    )
    parser.add_argument(
        "--commit",
        help="the commit measured, where git cannot tell it "
        "(a copy of the tree without its history)",
    )
    parser.add_argument(
        "--cpu-dry-run",
        action="store_true",
        help="run every part on the CPU at toy sizes: checks the script",
    )
    args = parser.parse_args(argv)
    if not args.cpu_dry_run and not torch.cuda.is_available():
        print(f"error: {NO_GPU}", file=sys.stderr)
        return 2
    found = check(args.cpu_dry_run)
    path = args.out or default_out(found)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    try:
        text = measurements.checked_text(as_measurement(found, args.commit), path.name)
    except measurements.MeasurementError as exc:  # the figures are kept all the same
        print(f"warning: {exc}; the raw figures are written without the record", file=sys.stderr)
        text = json.dumps(found, indent=1, default=str) + "\n"
    temp.write_text(text)
    temp.replace(path)
    print("\n".join(table(found)))
    print(f"written: {path}")
    return 1 if found["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
