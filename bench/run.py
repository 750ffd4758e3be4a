"""The performance harness: every figure as a ratio measured in one process run.

    python -m bench.run            # all seven figures, about 17 minutes on 2 cores
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
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.common import run_child

BENCH = Path(__file__).resolve().parent


def figure_d() -> dict:
    """Avalanche 0.6.0's LearningToPrompt (in its own environment, see bench.peer_venv)
    and ours on the same shape, each in its own process: ours with the card defaults,
    then with activation checkpointing of the first 8 of 12 blocks."""
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
    for blocks in ("0", "8"):
        ours = run_child([sys.executable, "-m", "bench.l2p_shape", "auto", blocks], "our L2P")
        out["ours"].append({**ours.result, "wall_s": ours.wall_s,
                            "peak_rss_gb": ours.peak_rss_gb,
                            "time_ratio": ours.result["seconds"] / peer.result["seconds"],
                            "memory_ratio": ours.peak_rss_gb / peer.peak_rss_gb})
    return out


def main(which: list[str]) -> dict:
    from bench import (
        extraction_engines,
        features_reuse,
        loop_overhead,
        threads_loaded,
        throughput,
        tosca_eval,
    )
    figures = {"a": features_reuse.main, "b": tosca_eval.main, "c": loop_overhead.main,
               "d": figure_d, "e": throughput.main, "f": threads_loaded.main,
               "g": extraction_engines.main}
    results = {}
    for key in which or list(figures):
        results[key] = figures[key]()
        print(key, json.dumps(results[key]), flush=True)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
