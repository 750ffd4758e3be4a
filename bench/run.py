"""The performance harness: every figure as a ratio measured in one process run.

    python -m bench.run            # all nine figures, about 20 minutes on 2 cores
    python -m bench.run b c        # a subset

(a) second invocation vs first (feature cache), target >= 5x
(b) TOSCA evaluation at T = 10 vs a backbone pass per module, target >= 5x
(c) features-only training loop through Avalanche vs bare PyTorch, target <= 1.5x
(d) our L2P vs Avalanche 0.6.0's LearningToPrompt, both measured here on the same
    shape, each in its own process (peak RSS of the process): time and memory,
    targets <= 0.7x and <= 0.6x, with the card defaults and checkpoint_blocks 8;
    the first run creates bench/.venv-avalanche (timm 0.6.13) for the peer
(e) frozen ViT-B/16 extraction images/s fp32 vs bf16 (target >= 40 % of the
    bf16 peak; this CPU's GEMM peak is measured too) and the fmnist accuracy
    change bf16 makes
(f) features-only training loop with one CPU-bound competitor per core vs idle,
    at the old thread count (all cores) and the new (1), target <= 2.5x at 1
(g) frozen EfficientNet-Lite0 extraction (the default run's backbone pass) through
    torch eager, TorchScript, OpenVINO and ONNX Runtime: images/s, share of this CPU's
    matmul peak, largest feature difference against eager fp32
(h) our DualPrompt and CODA-Prompt vs LAMDA-PILOT's on (d)'s shape, each in its own
    process: time and memory (the issue's targets: <= 0.5x and <= 0.6x); needs a
    LAMDA-PILOT checkout ($CL_BENCH_PILOT, default ../LAMDA-PILOT beside this
    repository; bench/parity.md says which commit) and runs it with (d)'s
    bench/.venv-avalanche
(i) the end of a `cl-bench` process: CPython's teardown after importing the run's
    stack vs the entry point's quick exit (seconds each, medians of alternated children)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from bench.common import run_child

BENCH = Path(__file__).resolve().parent
PILOT_FILES = ("models/dualprompt.py", "models/coda_prompt.py", "exps/dualprompt.json",
               "exps/coda_prompt.json", "trainer.py")


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
    peer = run_child([str(python), str(BENCH / "avalanche_l2p.py")],
                     "Avalanche's LearningToPrompt")
    out = {"avalanche": {**peer.result, "wall_s": peer.wall_s, "peak_rss_gb": peer.peak_rss_gb},
           "ours": []}
    for blocks in CHECKPOINT_BLOCKS:
        out["ours"].append(ours_against("l2p", blocks, peer))
    return out


def ours_against(method: str, blocks: str, peer) -> dict:
    """Our ``method`` on the shape of bench.prompt_shape in its own process, with its
    time and peak RSS as ratios of the peer's (``peer``: a finished ChildRun)."""
    ours = run_child([sys.executable, "-m", "bench.prompt_shape", method, "auto", blocks],
                     f"our {method}")
    return {**ours.result, "wall_s": ours.wall_s, "peak_rss_gb": ours.peak_rss_gb,
            "time_ratio": ours.result["seconds"] / peer.result["seconds"],
            "memory_ratio": ours.peak_rss_gb / peer.peak_rss_gb}


def pilot_checkout() -> Path:
    """The LAMDA-PILOT checkout (h) runs; FileNotFoundError naming what is missing and
    what to do when there is none."""
    root = Path(os.environ.get("CL_BENCH_PILOT", BENCH.parent.parent / "LAMDA-PILOT"))
    missing = [f for f in PILOT_FILES if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"no LAMDA-PILOT checkout at {root} (missing {', '.join(missing)}); clone it "
            "there at the commit bench/parity.md names, or point $CL_BENCH_PILOT at one")
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
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "not a git checkout"
    out = {"pilot": str(root), "pilot_commit": commit}
    with tempfile.TemporaryDirectory(prefix="pilot-") as scratch:
        copy = Path(scratch) / "pilot"
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".git"))
        patch_pc(copy)
        for method in ("dualprompt", "coda-prompt"):
            peer = run_child([str(python), str(BENCH / "pilot_prompt_shape.py"), method],
                             f"LAMDA-PILOT's {method}", cwd=str(copy))
            out[method] = {"pilot": {**peer.result, "wall_s": peer.wall_s,
                                     "peak_rss_gb": peer.peak_rss_gb},
                           "ours": [ours_against(method, b, peer) for b in CHECKPOINT_BLOCKS]}
    return out


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
    figures = {"a": features_reuse.main, "b": tosca_eval.main, "c": loop_overhead.main,
               "d": figure_d, "e": throughput.main, "f": threads_loaded.main,
               "g": extraction_engines.main, "h": figure_h, "i": process_exit.main}
    results = {}
    for key in which or list(figures):
        results[key] = figures[key]()
        print(key, json.dumps(results[key]), flush=True)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
