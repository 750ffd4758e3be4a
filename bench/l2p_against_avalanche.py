"""Figure l2p-against-avalanche: our L2P against Avalanche 0.6.0's own
``LearningToPrompt`` on one shape (bench.prompt_shape's), each in its own process, time
and peak resident set; ours at the card defaults and with 8 and 12 checkpointed blocks.
The first run creates bench/.venv-avalanche (timm 0.6.13) for the peer
(bench.peer_venv); the peer's side is bench/avalanche_l2p.py.

    python -m bench.run l2p-against-avalanche
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.common import run_child

BENCH = Path(__file__).resolve().parent

# ours here and in prompts-against-pilot: the card defaults, then activation
# checkpointing of the first 8 and of all 12 blocks (the least memory; the same
# numbers, more time)
CHECKPOINT_BLOCKS = ("0", "8", "12")


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


def main() -> dict:
    """Avalanche 0.6.0's LearningToPrompt (in its own environment, see bench.peer_venv)
    and ours on the same shape, each in its own process: ours at each of
    ``CHECKPOINT_BLOCKS``."""
    from bench.peer_venv import PeerVenvError, peer_python

    try:
        python = peer_python()
    except PeerVenvError as e:
        print(f"(l2p-against-avalanche) not measured: {e}", file=sys.stderr)
        return {"not_measured": str(e)}
    peer = run_child([str(python), str(BENCH / "avalanche_l2p.py")], "Avalanche's LearningToPrompt")
    out = {
        "avalanche": {**peer.result, "wall_s": peer.wall_s, "peak_rss_gb": peer.peak_rss_gb},
        "ours": [],
    }
    for blocks in CHECKPOINT_BLOCKS:
        out["ours"].append(ours_against("l2p", blocks, peer))
    return out
