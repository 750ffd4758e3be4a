"""flock helpers shared by the results store and the feature cache.

flock locks belong to an open file and vanish when it closes, including when
its process is killed, so nothing here ever has to detect a stale lock. On NFS,
Linux clients (>= 2.6.12) turn flock into POSIX locks that the server
arbitrates across nodes (needs a descriptor opened for writing for exclusive
locks, which these helpers use; released after the lease, about 90 s, when a
node dies). Filesystems without working locks fail loudly here instead of
silently letting two processes compute the same thing.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cl_bench.errors import UserError

_OPEN: set[int] = set()  # this process's lock-file descriptors


def open_lock_file(path: Path) -> int:
    """Open (create) a lock file; its descriptor is closed in forked children. A folder
    or an unwritable file in its place is the user's to move, not a bug."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # minus umask
    except OSError as e:
        raise UserError(
            f"Cannot open the lock file {path} ({e.strerror}): cl-bench keeps a "
            "lock there. Remove or rename what is in its place, or make its "
            "folder writable."
        ) from None
    _OPEN.add(fd)
    return fd


def close_lock_file(fd: int) -> None:
    _OPEN.discard(fd)
    os.close(fd)


def _drop_in_child() -> None:
    """A flock belongs to the open file, which a forked child shares: a DataLoader
    worker forked while a run held its lock would keep holding it after the run
    failed and released it, for as long as the worker lives (until the parent's
    garbage collector shuts it down), and the next run waiting on the same
    feature-cache lock would wait forever. The child never needs the locks."""
    for fd in _OPEN:
        try:
            os.close(fd)
        except OSError:
            pass
    _OPEN.clear()


os.register_at_fork(after_in_child=_drop_in_child)


def try_flock(fd: int, mode: int, path: Path, block: bool = False) -> bool:
    """flock ``mode`` on ``fd``; False when another process holds a conflicting lock
    (never when ``block``)."""
    try:
        fcntl.flock(fd, mode if block else mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        raise UserError(
            f"Cannot lock {path}: {e.strerror}. cl-bench needs working file locks there "
            "(a local disk; NFS with locking, i.e. not mounted with nolock; Lustre mounted "
            "with -o flock; GPFS). Choose a folder on such a filesystem."
        ) from None


@contextmanager
def held(path: Path) -> Iterator[None]:
    """Wait for the exclusive lock on ``path`` (created if missing) and hold it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(path)
    try:
        try_flock(fd, fcntl.LOCK_EX, path, block=True)
        yield
    finally:
        close_lock_file(fd)
