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
            "with -o flock; GPFS). Choose a folder on such a filesystem.") from None


@contextmanager
def held(path: Path) -> Iterator[None]:
    """Wait for the exclusive lock on ``path`` (created if missing) and hold it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try_flock(fd, fcntl.LOCK_EX, path, block=True)
        yield
    finally:
        os.close(fd)
