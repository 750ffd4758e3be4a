"""The performance harness: every figure as a ratio measured in one process run.

    python -m bench.run            # all nine figures, one after another
    python -m bench.run b c        # a subset

bench/figures.yaml says what each figure measures and its target; each one measured is
printed as one JSON line and recorded as bench/results/FIGURE-DATE-CPU.json
(:func:`bench.measurements.write`):

(a) second invocation vs first (feature cache)
(b) TOSCA evaluation at T = 10 vs a backbone pass per module
(c) features-only training loop through Avalanche vs bare PyTorch
(d) our L2P vs Avalanche 0.6.0's LearningToPrompt on the same shape, each in its own
    process (peak RSS of the process): time and memory, ours at the card defaults and
    with 8 and 12 checkpointed blocks; the first run creates bench/.venv-avalanche
    (timm 0.6.13) for the peer
(e) frozen ViT-B/16 extraction images/s fp32 vs bf16 against this CPU's GEMM peak, and
    the fmnist accuracy change bf16 makes
(f) features-only training loop with one CPU-bound competitor per core vs idle, at the
    old thread count (all cores) and the new (1)
(g) frozen EfficientNet-Lite0 extraction (the default run's backbone pass) through
    torch eager, TorchScript, OpenVINO and ONNX Runtime
(h) our DualPrompt and CODA-Prompt vs LAMDA-PILOT's on (d)'s shape, each in its own
    process; needs a LAMDA-PILOT checkout ($CL_BENCH_PILOT, default ../LAMDA-PILOT
    beside this repository; bench/parity.md says which commit) and runs it with (d)'s
    bench/.venv-avalanche
(i) the end of a `cl-bench` process: CPython's teardown after importing the run's
    stack vs the entry point's quick exit
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from bench.common import run_child

BENCH = Path(__file__).resolve().parent
PILOT_FILES = (
    "models/dualprompt.py",
    "models/coda_prompt.py",
    "exps/dualprompt.json",
    "exps/coda_prompt.json",
    "trainer.py",
)


# ours in (d) and (h): the card defaults, then activation checkpointing of the first 8
# and of all 12 blocks (the least memory; the same numbers, more time)
CHECKPOINT_BLOCKS = ("0", "8", "12")


def figure_d() -> dict:
    """Avalanche 0.6.0's LearningToPrompt (in its own environment, see bench.peer_venv)
    and ours on the same shape, each in its own process: ours at each of
    ``CHECKPOINT_BLOCKS``."""
    from bench.peer_venv import PeerVenvError, peer_python

    try:
        python = peer_python()
    except PeerVenvError as e:
        print(f"(d) not measured: {e}", file=sys.stderr)
        return {"not_measured": str(e)}
    peer = run_child([str(python), str(BENCH / "avalanche_l2p.py")], "Avalanche's LearningToPrompt")
    out = {
        "avalanche": {**peer.result, "wall_s": peer.wall_s, "peak_rss_gb": peer.peak_rss_gb},
        "ours": [],
    }
    for blocks in CHECKPOINT_BLOCKS:
        out["ours"].append(ours_against("l2p", blocks, peer))
    return out


def ours_against(method: str, blocks: str, peer) -> dict:
    """Our ``method`` on the shape of bench.prompt_shape in its own process, with its
    time and peak RSS as ratios of the peer's (``peer``: a finished ChildRun)."""
    ours = run_child(
        [sys.executable, "-m", "bench.prompt_shape", method, "auto", blocks], f"our {method}"
    )
    return {
        **ours.result,
        "wall_s": ours.wall_s,
        "peak_rss_gb": ours.peak_rss_gb,
        "time_ratio": ours.result["seconds"] / peer.result["seconds"],
        "memory_ratio": ours.peak_rss_gb / peer.peak_rss_gb,
    }


def pilot_checkout() -> Path:
    """The LAMDA-PILOT checkout (h) runs; FileNotFoundError naming what is missing and
    what to do when there is none."""
    root = Path(os.environ.get("CL_BENCH_PILOT", BENCH.parent.parent / "LAMDA-PILOT"))
    missing = [f for f in PILOT_FILES if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"no LAMDA-PILOT checkout at {root} (missing {', '.join(missing)}); clone it "
            "there at the commit bench/parity.md names, or point $CL_BENCH_PILOT at one"
        )
    return root


def figure_h() -> dict:
    """LAMDA-PILOT's DualPrompt and CODA-Prompt (in bench/.venv-avalanche, in a scratch
    copy of its checkout with bench/parity/patch_pc.py's edits, which at ViT-B/16 change
    nothing but let CODA-Prompt train on the CPU) and ours on (d)'s shape, each in its
    own process, ours at each of ``CHECKPOINT_BLOCKS``."""
    import shutil
    import subprocess
    import tempfile

    from bench.parity.patch_pc import patch as patch_pc
    from bench.peer_venv import PeerVenvError, peer_python

    try:
        root, python = pilot_checkout(), peer_python()
    except (FileNotFoundError, PeerVenvError) as e:
        print(f"(h) not measured: {e}", file=sys.stderr)
        return {"not_measured": str(e)}
    commit = (
        subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "not a git checkout"
    )
    out = {"pilot": str(root), "pilot_commit": commit}
    with tempfile.TemporaryDirectory(prefix="pilot-") as scratch:
        copy = Path(scratch) / "pilot"
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".git"))
        patch_pc(copy)
        for method in ("dualprompt", "coda-prompt"):
            peer = run_child(
                [str(python), str(BENCH / "pilot_prompt_shape.py"), method],
                f"LAMDA-PILOT's {method}",
                cwd=str(copy),
            )
            out[method] = {
                "pilot": {**peer.result, "wall_s": peer.wall_s, "peak_rss_gb": peer.peak_rss_gb},
                "ours": [ours_against(method, b, peer) for b in CHECKPOINT_BLOCKS],
            }
    return out


def _gb(s: float, gb: float) -> str:
    return f"{s:.1f} s, {gb:.2f} GB"


def _blocks(row: dict) -> str:
    k = int(row["checkpoint_blocks"])
    return "card defaults" if k == 0 else f"checkpoint_blocks: {k}"


def _against(name: str, rows: list[dict]) -> list[tuple[str, str]]:
    return [
        (
            f"{name}, {_blocks(r)}",
            f"{r['time_ratio']:.2f}x time, {r['memory_ratio']:.2f}x memory "
            f"({_gb(r['seconds'], r['peak_rss_gb'])})",
        )
        for r in rows
    ]


def _percent(share: float) -> str:
    return f"{100 * share:.0f} %"


def headline(key: str, r: dict) -> list[tuple[str, str]]:
    """The rows a reader compares, from figure ``key``'s result ``r``."""
    if key == "a":
        return [
            (
                "first invocation / second (features from the cache)",
                f"{r['ratio']:.2f}x ({r['first_s']:.1f} s vs {r['second_s']:.1f} s)",
            )
        ]
    if key == "b":
        return [
            (
                "ours (one pass, modules batched) vs a backbone pass per module, T = 10, batch 8",
                f"{r['ratio']:.1f}x ({r['ours_s']:.2f} s vs {r['per_module_backbone_s']:.1f} s)",
            )
        ]
    if key == "c":
        return [
            (
                "Avalanche loop / bare loop",
                f"{r['ratio']:.2f}x ({r['avalanche_s']:.2f} s vs {r['bare_s']:.2f} s)",
            )
        ]
    if key == "d":
        peer = r["avalanche"]
        return [
            ("Avalanche", _gb(peer["seconds"], peer["peak_rss_gb"])),
            *_against("ours", r["ours"]),
        ]
    if key == "e":
        peaks = r["gemm_peak_gflops"]
        rows = [
            (
                label,
                f"{r[label]['images_per_s']:.2f} img/s = "
                f"{_percent(r[label]['share_of_this_cpu_peak'])} of this CPU's "
                f"{precision} GEMM peak ({peaks[precision]:.0f} GFLOP/s), "
                f"{_percent(r[label]['share_of_reference_bf16_peak'])} of the 2,300 "
                "GFLOP/s of docs/references.md section 6",
            )
            for label, precision in (
                ("fp32", "fp32"),
                ("bf16", "bf16"),
                ("bf16 + bf16 weights", "bf16"),
            )
        ]
        acc = r["fmnist_last_acc"]
        return rows + [
            (
                "fmnist last accuracy, fp32 -> bf16",
                ", ".join(f"{m} {a['fp32']:.1f} -> {a['bf16']:.1f}" for m, a in acc.items()),
            )
        ]
    if key == "f":
        old, new = r["old"], r["new"]
        return [
            (
                f"{new['threads']} thread (new), loaded / idle",
                f"{new['loaded_over_idle']:.2f}x ({new['idle_s']:.2f} s -> "
                f"{new['loaded_s']:.2f} s)",
            ),
            (
                f"{old['threads']} threads (old), loaded / idle",
                f"{old['loaded_over_idle']:.2f}x ({old['idle_s']:.2f} s -> "
                f"{old['loaded_s']:.2f} s)",
            ),
            ("loaded, old / new", f"{r['loaded_old_over_new']:.2f}x"),
        ]
    if key == "g":
        peaks = r["peak_gflops"]
        rows = [
            ("matrix-multiply peak", ", ".join(f"{k} {v:,.0f} GFLOP/s" for k, v in peaks.items()))
        ]
        for name, e in r["engines"].items():
            # an engine's share of the peak of its own precision
            k = "bf16" if "bf16" in name and "bf16" in peaks else "fp32"
            shares = f"{_percent(e[f'share_of_{k}_peak'])} of the {k} peak"
            diff = (
                f"; largest feature difference against eager fp32 {e['max_abs_diff']:.2g}"
                if "max_abs_diff" in e
                else ""
            )
            rows.append(
                (name, f"{e['images_per_s']:.1f} img/s ({e['speedup']:.2f}x, {shares}){diff}")
            )
        return rows
    if key == "h":
        rows = []
        for method, name in (("dualprompt", "DualPrompt"), ("coda-prompt", "CODA-Prompt")):
            pilot = r[method]["pilot"]
            rows.append((f"{name}, PILOT", _gb(pilot["seconds"], pilot["peak_rss_gb"])))
            rows += _against(f"{name}, ours", r[method]["ours"])
        return rows
    if key == "i":
        return [
            (
                "saved per process",
                f"{r['saved_per_process_s']:.2f} s (median teardown - median quick exit)",
            ),
            (
                "CPython's teardown",
                f"{min(r['teardown_s']):.2f}-{max(r['teardown_s']):.2f}"
                f" s (median {r['median_teardown_s']:.2f} s)",
            ),
            (
                "quick exit",
                f"{min(r['quick_exit_s']):.3f}-{max(r['quick_exit_s']):.3f} s "
                f"(median {r['median_quick_exit_s']:.3f} s)",
            ),
        ]
    raise KeyError(key)


def precision_of(key: str, r: dict) -> str:
    """``meta.precision`` of figure ``key``'s result ``r``."""
    if key in ("d", "h"):
        ours = r["ours"] if key == "d" else r["dualprompt"]["ours"]
        return ours[0]["precision"]
    if key == "a":
        import torch

        from cl_bench.engine.environment import resolve_precision

        return resolve_precision("auto", torch.device("cpu"))
    if key == "e":
        return "fp32, bf16"
    if key == "g":
        return "fp32, bf16" if "bf16" in r["peak_gflops"] else "fp32"
    if key == "i":
        return "n/a (no arithmetic measured)"
    return "fp32"


def record(key: str, result: dict, args: list[str]) -> Path | None:
    """Figure ``key``'s result as bench/results/KEY-DATE-CPU.json, made by ``python ARGS``;
    nothing where it was not measured (a missing peer). Returns the file."""
    from bench.measurements import command_line, write

    if "not_measured" in result:
        return None
    data = {key: result} if key in ("d", "h") else result
    path = write(key, headline(key, result), data, precision_of(key, result), command_line(args))
    print(f"({key}) recorded in {path.relative_to(BENCH.parent)}", file=sys.stderr)
    return path


def main(which: list[str]) -> dict:
    from bench import (
        extraction_engines,
        features_reuse,
        loop_overhead,
        process_exit,
        threads_loaded,
        throughput,
        tosca_eval,
    )

    figures = {
        "a": features_reuse.main,
        "b": tosca_eval.main,
        "c": loop_overhead.main,
        "d": figure_d,
        "e": throughput.main,
        "f": threads_loaded.main,
        "g": extraction_engines.main,
        "h": figure_h,
        "i": process_exit.main,
    }
    unknown = [k for k in which if k not in figures]
    if unknown:
        print(
            f"usage: python -m bench.run [{' '.join(figures)}]; unknown: {' '.join(unknown)}",
            file=sys.stderr,
        )
        sys.exit(2)
    results = {}
    for key in which or list(figures):
        results[key] = figures[key]()
        print(key, json.dumps(results[key]), flush=True)
        record(key, results[key], ["-m", "bench.run", key])
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
