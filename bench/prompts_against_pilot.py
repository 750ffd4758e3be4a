"""Figure prompts-against-pilot: our DualPrompt and CODA-Prompt against LAMDA-PILOT's
own ``Learner``s on l2p-against-avalanche's shape, each in its own process, time and
peak resident set; ours at the card defaults and with 8 and 12 checkpointed blocks.
Needs a LAMDA-PILOT checkout ($CL_BENCH_PILOT, default ../LAMDA-PILOT beside this
repository; bench/parity.md says which commit) and runs it with
bench/.venv-avalanche; the peer's side is bench/pilot_prompt_shape.py.

    python -m bench.run prompts-against-pilot
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.common import run_child
from bench.l2p_against_avalanche import CHECKPOINT_BLOCKS, ours_against

BENCH = Path(__file__).resolve().parent
PILOT_FILES = (
    "models/dualprompt.py",
    "models/coda_prompt.py",
    "exps/dualprompt.json",
    "exps/coda_prompt.json",
    "trainer.py",
)


def pilot_checkout() -> Path:
    """The LAMDA-PILOT checkout this figure runs; FileNotFoundError naming what is
    missing and what to do when there is none."""
    root = Path(os.environ.get("CL_BENCH_PILOT", BENCH.parent.parent / "LAMDA-PILOT"))
    missing = [f for f in PILOT_FILES if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"no LAMDA-PILOT checkout at {root} (missing {', '.join(missing)}); clone it "
            "there at the commit bench/parity.md names, or point $CL_BENCH_PILOT at one"
        )
    return root


def main() -> dict:
    """LAMDA-PILOT's DualPrompt and CODA-Prompt (in bench/.venv-avalanche, in a scratch
    copy of its checkout with bench/parity/patch_pilot_prompts.py's edits, which at ViT-B/16 change
    nothing but let CODA-Prompt train on the CPU) and ours on the same shape, each in its
    own process, ours at each of ``CHECKPOINT_BLOCKS``."""
    import shutil
    import subprocess
    import tempfile

    from bench.parity.patch_pilot_prompts import patch as patch_pilot_prompts
    from bench.peer_venv import PeerVenvError, peer_python

    try:
        root, python = pilot_checkout(), peer_python()
    except (FileNotFoundError, PeerVenvError) as e:
        print(f"(prompts-against-pilot) not measured: {e}", file=sys.stderr)
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
        patch_pilot_prompts(copy)
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
