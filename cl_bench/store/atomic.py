"""Atomic file replacement: the one way cl-bench writes a file that others read (result
records, the feature cache, checkpoints, reports)."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


@functools.cache
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def replace_atomically(path: Path, write: Callable[[IO], None], binary: bool = False) -> None:
    """Write ``path`` through ``write(file)`` so that readers see the old file or the
    whole new one, never a partial one: a temp file in the same folder, fsync, rename.
    Concurrent writers of the same content are safe: the last rename wins."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp's 0600 would hide the file
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
