"""Per-task checkpoints of one run: a run killed mid-stream (preemption, a time limit,
SIGKILL) resumes at its last finished task and ends with the numbers an
uninterrupted run gives.

``<result>.ckpt`` lives beside the result (:func:`cl_bench.store.results.checkpoint_path`),
written under the run's lock after every task but the last and removed when the
result is written (:func:`cl_bench.store.results.run_once`). It holds the strategy's
state (:mod:`cl_bench.contract.resume`: model, Avalanche's clock, the plugins: the recorder's
rows, the FLOP meter, EWC's importances and anchors), the RNG states (Python,
NumPy, torch CPU and CUDA), the number of finished tasks and the seconds spent so
far. Features are not saved: the resumed run reads them from the feature cache.

The file is a ``torch.save`` archive followed by a one-line trailer with the
archive's SHA-256, replaced atomically. Loading checks the digest, then that the
checkpoint is this run's (result file name, which holds the config hash; method,
seed, number of tasks), loading tensors only (``weights_only``). A damaged or
foreign checkpoint, or one the freshly built strategy cannot take, is discarded
with a warning and the run starts over from a freshly built strategy; it is never
half-used.

Every callable in :data:`SAVED` is called with the number of finished tasks right after
a checkpoint is written; cl-bench adds none. A test's process adds one that SIGKILLs it
there, to kill a run between two given tasks.
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import torch

from cl_bench.store.atomic import replace_atomically
from cl_bench.store.results import checkpoint_path

FORMAT = 1
MAGIC = b"\ncl-bench checkpoint sha256 "
TRAILER_LEN = len(MAGIC) + 64 + 1
# called with the number of finished tasks after each checkpoint is written
SAVED: list[Callable[[int], None]] = []


class Damaged(Exception):
    """A checkpoint file that is not a whole, intact checkpoint."""


class _Hashing:
    """A write-only file that hashes what passes through it."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.sha = f, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def write(path: Path, payload: dict) -> None:
    """``torch.save(payload)`` + digest trailer, replacing ``path`` atomically."""

    def dump(f: IO[bytes]) -> None:
        hashing = _Hashing(f)
        torch.save(payload, hashing)
        f.write(MAGIC + hashing.sha.hexdigest().encode() + b"\n")

    replace_atomically(path, dump, binary=True)


def read(path: Path) -> dict:
    """The payload of an intact checkpoint (tensors on the CPU); raises
    :class:`Damaged` otherwise."""
    size = path.stat().st_size
    if size <= TRAILER_LEN:
        raise Damaged("it is shorter than its trailer")
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        left = size - TRAILER_LEN
        while left:
            chunk = f.read(min(1 << 20, left))
            if not chunk:
                raise Damaged("it was truncated while being read")
            sha.update(chunk)
            left -= len(chunk)
        trailer = f.read()
    if trailer != MAGIC + sha.hexdigest().encode() + b"\n":
        raise Damaged("its SHA-256 does not match its contents")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a verified file that torch cannot read
        raise Damaged(f"torch cannot read it ({type(e).__name__}: {e})") from e


def rng_state() -> dict:
    """Every random generator a run draws from (tensors and plain values only)."""
    kind, keys, *rest = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), *rest),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
    }


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


def _warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


class RunCheckpoint:
    """The per-task checkpoint of one run; ``result=None``: none is read or written.

    ``start(build)`` builds the run's strategy and restores it from the checkpoint
    if there is a good one; then ``done`` is the number of finished tasks and
    ``elapsed_s`` the seconds spent on them before. ``save`` after each task.
    """

    def __init__(self, result: Path | None, key: dict) -> None:
        self.path = checkpoint_path(result) if result is not None else None
        self.key = {"format": FORMAT, "result": Path(result).name if result else None, **key}
        self.done = 0
        self.elapsed_s = 0.0

    @property
    def resumed_from(self) -> int | None:
        """The first task this process trained, when it resumed from a checkpoint."""
        return self.done or None

    def start(self, build: Callable[[], tuple]) -> tuple:
        """``build()`` -> (strategy, *its plugins), restored to the last finished task
        of a good checkpoint, else fresh (and then as if no checkpoint had existed)."""
        saved = self._load()
        before = rng_state()
        built = build()
        if saved is None:
            return built
        try:
            built[0].restore_state(saved["strategy"])
        except Exception as e:  # noqa: BLE001 - any misfit: discard, never half-use
            self._discard(f"it does not fit this run's strategy ({type(e).__name__}: {e})")
            set_rng_state(before)
            return build()
        set_rng_state(saved["rng"])
        self.done, self.elapsed_s = saved["done"], saved["elapsed_s"]
        print(
            f"  resuming {self.key['method']} seed {self.key['seed']} at task "
            f"{self.done + 1}/{self.key['tasks']} from {self.path}",
            flush=True,
        )
        return built

    def save(self, strategy, done: int, elapsed_s: float) -> None:
        """Checkpoint after ``done`` finished tasks (``elapsed_s``: this process's
        seconds so far). Not after the last task: the result is written next."""
        if self.path is None or done >= self.key["tasks"]:
            return
        write(
            self.path,
            {
                "key": self.key,
                "done": done,
                "elapsed_s": self.elapsed_s + elapsed_s,
                "rng": rng_state(),
                "strategy": strategy.checkpoint_state(),
            },
        )
        for saved in SAVED:
            saved(done)

    def _load(self) -> dict | None:
        if self.path is None or not self.path.exists():
            return None
        try:
            saved = read(self.path)
        except (Damaged, OSError) as e:
            self._discard(f"it is damaged: {e}")
            return None
        key = saved.get("key") if isinstance(saved, dict) else None
        if (
            isinstance(key, dict)
            and key != self.key
            and {**key, "code": self.key.get("code")} == self.key
        ):
            self._discard(
                f"it was made by other code (code {key.get('code')}, now {self.key.get('code')})"
            )
            return None
        if key != self.key:
            self._discard(f"it is another run's (key {key}, expected {self.key})")
            return None
        return saved

    def _discard(self, why: str) -> None:
        _warn(f"discarded the checkpoint {self.path}: {why}; the run starts over.")
        self.path.unlink(missing_ok=True)
