"""A separate virtual environment for the peer toolbox that figure l2p-against-avalanche
measures side by side: Avalanche 0.6.0's ``LearningToPrompt`` needs timm 0.6.13 (it
fails on timm 1.0, which cl-bench needs), so it cannot run in the project's environment.
Created on first use in ``bench/.venv-avalanche`` (git-ignored) and reused while its
pins are unchanged."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parent / ".venv-avalanche"
# torch and torchvision as in the project's environment, so that the same kernels run
PINS = ("avalanche-lib==0.6.0", "timm==0.6.13", "torch==2.14.1", "torchvision==0.29.1")


class PeerVenvError(RuntimeError):
    """The peer environment could not be made; the message says why and what to do."""


def _base_python() -> str:
    """A Python 3.11 to create the environment with (the pinned torch wheels are cp311)."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if found is None:
        raise PeerVenvError(
            "bench l2p-against-avalanche needs Python 3.11 to create bench/.venv-avalanche "
            "(torch 2.14.1 and the pinned peer packages are installed for it), "
            "but neither this interpreter nor python3.11 on PATH is 3.11. "
            "Install Python 3.11 or put it on PATH."
        )
    return found


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise PeerVenvError(
            f"bench l2p-against-avalanche: {what} failed (exit {done.returncode}); the peer "
            f"environment {VENV} is left unfinished and is made again on the "
            f"next run. Last lines:\n{tail}"
        )


def peer_python() -> Path:
    """The peer environment's interpreter, creating the environment when it is missing
    or was made with other pins (several minutes: torch is a large wheel)."""
    python, marker = VENV / "bin" / "python", VENV / ".installed"
    if marker.exists() and marker.read_text() == "\n".join(PINS):
        return python
    if VENV.exists():
        shutil.rmtree(VENV)
    print(
        f"bench l2p-against-avalanche: creating {VENV} with {', '.join(PINS)} (once)",
        file=sys.stderr,
    )
    _run([_base_python(), "-m", "venv", str(VENV)], "creating the virtual environment")
    _run([str(python), "-m", "pip", "install", "--quiet", *PINS], f"pip install {' '.join(PINS)}")
    marker.write_text("\n".join(PINS))
    return python
