"""The results store: one JSON per method x scenario x seed, written atomically,
computed at most once at a time, with failures recorded beside the result.

Path: ``<out>/runs/<scenario>/<method>/<seed>-<confighash>.json``; the hash
covers everything that changes the numbers (resolved method and scenario
settings, backbone and weights), so a changed setting is a new run and the
same command finds its finished runs and skips them.

Beside a result live ``<result>.lock`` (the run's lock and its last holder),
``<result>.failed`` (the last failure, removed when the run succeeds) and
``<result>.ckpt`` (the unfinished run's per-task checkpoint, removed when the result
is written); none ends in ``.json``, so readers of results never see them. Each grid
writes ``<out>/runs/_grids/<hash>.json``, the runs it planned, so ``cl-bench
status`` can tell a pending run from one nobody asked for. (Folders in
``runs/`` starting with ``_`` are never scenarios: cards named ``_*`` are not
loaded. Keeping them in ``runs/`` keeps them wherever results are git-ignored.)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cl_bench.errors import UserError
from cl_bench.store.atomic import replace_atomically
from cl_bench.store.filelock import close_lock_file, open_lock_file, try_flock
from cl_bench.store.protocol_block import upgraded
from cl_bench.store.record_check import problems, reason
from cl_bench.store.schema import SCHEMA_VERSION, config_hash
from cl_bench.store.staleness import stale_reasons

LOCK_WAIT_S = 0.5  # covers a `cl-bench status` probe, which holds a lock for microseconds
TRACEBACK_TAIL = 30


def run_path(out: Path, scenario: str, method: str, seed: int, config: dict) -> Path:
    return Path(out) / "runs" / scenario / method / f"{seed}-{config_hash(config)}.json"


class InvalidResult(ValueError):
    """A result file that is not a complete, valid record; the message says why."""


def load_valid(path: Path) -> dict:
    """The record at ``path`` if it is complete and valid (see :mod:`cl_bench.store.record_check`),
    the single test of a finished run for ``run``, ``status``, ``report`` and ``check``.

    Raises FileNotFoundError when there is no file (the run is not finished) and
    :class:`InvalidResult` for anything else: unreadable, empty, not JSON, not a
    record, or a record with a problem.
    """

    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidResult(f"unreadable ({type(e).__name__}: {e})") from None
    if not text.strip():
        raise InvalidResult("empty file")
    try:
        record = json.loads(text)
    except ValueError as e:
        raise InvalidResult(f"not valid JSON ({e}), e.g. a write cut short") from None
    found = problems(record, path)
    if found:
        raise InvalidResult(reason(found))
    return upgraded(record)


@dataclass
class Found:
    """What lies at a result's path: ``done`` (a valid record of the code and packages
    installed now), ``stale`` (a valid record of other code or packages; ``why`` says
    what changed) or ``none`` (no file, or one that is not a valid record)."""

    state: str
    record: dict | None = None
    why: tuple[str, ...] = ()


def found(path: Path) -> Found:
    try:
        record = load_valid(path)
    except (OSError, InvalidResult):
        return Found("none")
    why = stale_reasons(record)
    return Found("stale" if why else "done", record, tuple(why))


def is_done(path: Path) -> bool:
    """True when a complete, valid result of the current code exists: a stub, torn,
    damaged or foreign file is not done, nor is a stale one (:mod:`cl_bench.store.staleness`),
    so the run is computed again and the file replaced."""
    return found(path).state == "done"


def write_atomic(path: Path, data: dict) -> None:
    """Write JSON so that readers see the old file or the whole new one, never a
    partial one."""

    def dump(f) -> None:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")

    replace_atomically(path, dump)


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def find(out: Path, pattern: str = "*.json") -> list[Path]:
    """Result files (or, with ``pattern``, the files beside them) of every run in ``out``;
    the ``_*`` folders of grids and job logs are skipped."""
    return sorted(
        p
        for p in (Path(out) / "runs").glob(f"*/*/{pattern}")
        if not p.parent.parent.name.startswith("_")
    )


def lock_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".lock")


def failure_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".failed")


def checkpoint_path(path: Path) -> Path:
    """The run's per-task checkpoint (:mod:`cl_bench.engine.checkpoint`) while it is unfinished."""
    return Path(path).with_name(Path(path).name + ".ckpt")


def whoami() -> dict:
    """Who holds a lock or failed: enough to find the process or the SLURM job."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "job": os.environ.get("SLURM_JOB_ID"),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def held_by(holder: dict | None) -> str:
    """``pid 12 on node7 (SLURM job 345) since ...``, for messages about a held run."""
    if not holder:
        return "another process"
    job = f" (SLURM job {holder['job']})" if holder.get("job") else ""
    return f"pid {holder.get('pid')} on {holder.get('host')}{job} since {holder.get('since')}"


def _read_holder(fd: int) -> dict | None:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "null")
    except (OSError, ValueError):
        return None  # being rewritten right now, or never written


class RunLock:
    """An exclusive flock on ``<result>.lock``, held while the run is computed.

    The kernel drops the lock when its holder's descriptor closes, and so when the
    holder dies (SIGKILL, OOM killer, SLURM time limit): a killed run never leaves a
    stale lock, and no age or pid heuristics are needed (NFS: see
    :mod:`cl_bench.store.filelock`). The file stays, holding its last holder for
    ``cl-bench status``.
    """

    def __init__(self, result: Path) -> None:
        self.path = lock_path(result)
        self.holder: dict | None = None  # the other holder, when acquire() failed
        self._fd: int | None = None

    def acquire(self, wait_s: float = LOCK_WAIT_S) -> bool:
        """Take the lock without blocking on a running run (retrying for ``wait_s`` only,
        so that a status probe is not mistaken for a run); False when it is held."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_lock_file(self.path)
        deadline = time.monotonic() + wait_s
        while not try_flock(fd, fcntl.LOCK_EX, self.path):
            if time.monotonic() > deadline:
                self.holder = _read_holder(fd)
                close_lock_file(fd)
                return False
            time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(whoami()).encode(), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            close_lock_file(self._fd)
            self._fd = None


@dataclass
class LockState:
    held: bool
    holder: dict | None


def probe_lock(path: Path) -> LockState | None:
    """Is the run being computed now, and by whom? None when it never started.

    A shared lock taken and dropped at once: it fails while a run holds the
    exclusive one and never blocks anything but a concurrent acquire's first try.
    """
    try:
        fd = os.open(lock_path(path), os.O_RDONLY | os.O_NONBLOCK)  # a FIFO there: no hang
    except FileNotFoundError:
        return None
    try:
        held = not try_flock(fd, fcntl.LOCK_SH, lock_path(path))
        return LockState(held, _read_holder(fd))
    finally:
        os.close(fd)


def error_line(exc: BaseException) -> str:
    """The traceback's closing ``Type: message`` line, on one line."""
    text = exc.paragraph() if isinstance(exc, UserError) else " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def write_failure(path: Path, exc: BaseException) -> None:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    write_atomic(
        failure_path(path),
        {
            "status": "failed",
            "result": Path(path).name,
            "error": {
                "type": type(exc).__name__,
                "message": str(exc),
                "last_line": error_line(exc),
                "traceback_tail": tb.splitlines()[-TRACEBACK_TAIL:],
            },
            **whoami(),
        },
    )


def read_failure(path: Path) -> dict | None:
    try:
        return load(failure_path(path))
    except (OSError, ValueError):
        return None


@dataclass
class Attempt:
    """What :func:`run_once` did: ``ran`` it, found it ``done``, or found it ``running``
    in another process (``holder``)."""

    state: str
    record: dict | None = None
    holder: dict | None = None


def run_once(path: Path, compute: Callable[[], dict]) -> Attempt:
    """Compute and store one run unless it is finished or being computed elsewhere.

    Under the run's lock: check again that it is not finished (another process may
    have finished it since the caller looked), remove temp files a killed writer
    left, compute, check the record (:func:`refuse_invalid`), write atomically,
    forget an earlier failure. A failure is
    recorded beside the result and re-raised; an interrupt (KeyboardInterrupt,
    SIGKILL) records nothing, so the run counts as pending and the next
    invocation runs it again.
    """
    path = Path(path)
    lock = RunLock(path)
    if not lock.acquire():
        return Attempt("running", holder=lock.holder)
    try:
        if is_done(path):
            return Attempt("done", load(path))
        for leftover in path.parent.glob(f".{path.name}.*.tmp"):
            leftover.unlink(missing_ok=True)
        try:
            record = compute()
            refuse_invalid(record, path)
        except Exception as e:
            write_failure(path, e)
            raise
        write_atomic(path, record)
        failure_path(path).unlink(missing_ok=True)
        checkpoint_path(path).unlink(missing_ok=True)
        return Attempt("ran", record)
    finally:
        lock.release()


def check_run_files(out: Path, paths: list[Path]) -> None:
    """Refuse, before a grid writes anything, a path it will write that something else
    holds: a folder (or a FIFO, a dangling link) named like a run's result, lock file,
    failure record or checkpoint, or a file where one of its folders goes. Met later,
    each is a traceback: opening the lock after the data loaded, replacing the result
    or removing the checkpoint after the run trained."""
    out = Path(out)
    folders = {grid_path(out, paths).parent} | {
        out.joinpath(*p.relative_to(out).parts[:depth])
        for p in paths
        for depth in range(1, len(p.relative_to(out).parts))
    }
    for folder in sorted(folders):
        if os.path.lexists(folder) and not folder.is_dir():
            raise UserError(
                f"{folder} is a file, but cl-bench keeps results in a folder of "
                "that name. Remove or rename the file, or choose another --out."
            )
    for path in paths:
        for role, target in (
            ("result", path),
            ("lock file", lock_path(path)),
            ("failure record", failure_path(path)),
            ("checkpoint", checkpoint_path(path)),
        ):
            if os.path.lexists(target) and not target.is_file():
                kind = "a folder" if target.is_dir() else "not a regular file"
                raise UserError(
                    f"{target} is {kind}, but it is where cl-bench keeps the "
                    f"{role} of the run {path.name}. Remove or rename it, then run "
                    "the command again."
                )


def refuse_invalid(record: dict, path: Path) -> None:
    """A record that readers would not count as finished (a non-finite number, an
    accuracy out of range) is never written: the run fails, its failure is recorded,
    and no sweep report shows it as a result."""

    found = problems(record, path)
    if found:
        raise UserError(
            f"The run of {record.get('method')} seed {record.get('seed')} finished "
            f"but its record is not a valid result ({reason(found)}), so it was "
            "not saved; the failure is recorded in the run's .failed file. A "
            "non-finite number usually means training diverged: lower the "
            "learning rate."
        )


def grid_path(out: Path, paths: Iterable[Path]) -> Path:
    rel = sorted(str(Path(p).relative_to(out)) for p in paths)
    digest = hashlib.sha256("\n".join(rel).encode()).hexdigest()[:12]
    return Path(out) / "runs" / "_grids" / f"{digest}.json"


def write_grid(out: Path, paths: list[Path]) -> None:
    """Record the runs an invocation planned (relative to ``out``, so the folder can
    move); the same command plans the same grid and finds its file in place."""
    target = grid_path(out, paths)
    if not target.exists():
        write_atomic(
            target,
            {
                "schema_version": SCHEMA_VERSION,
                "runs": sorted(str(Path(p).relative_to(out)) for p in paths),
            },
        )


def planned(out: Path) -> list[Path]:
    """Every run any grid in ``out`` planned."""
    runs: set[Path] = set()
    for grid in sorted((Path(out) / "runs" / "_grids").glob("*.json")):
        try:
            runs.update(Path(out) / p for p in load(grid)["runs"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a foreign or damaged file is not a grid
    return sorted(runs)
