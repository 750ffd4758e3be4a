"""On-disk feature cache entries: verified on every read, never trusted.

An entry is two files: ``<digest>.npy``, the fp16 features as a plain numpy
array, and ``<digest>.json``, its sidecar (the key, shape, dtype and sha256 of
the array's values), written atomically after the array. Two files rather than
one self-describing file because the array then stays a plain ``.npy`` that
numpy memory-maps as it is, and because the sidecar is the entry's commit mark:
a writer killed between the two leaves an array without sidecar, which is
never read. A read checks both files, the key, the shape (against the sidecar
and against what the caller expects), the dtype, the checksum and that every
value is finite; any failure is :class:`Damaged`, and the caller deletes and
recomputes the entry. A damaged entry costs a recomputation, never a wrong
number.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from cl_bench.store.atomic import replace_atomically

DTYPE = "float16"


class Damaged(Exception):
    """A cache entry that must not be used; the message says what is wrong."""


def cache_dir() -> Path:
    """``$CL_BENCH_CACHE`` or ``~/.cache/cl-bench/features``."""
    return Path(os.environ.get("CL_BENCH_CACHE") or
                Path.home() / ".cache" / "cl-bench" / "features")


def sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def checksum(array: np.ndarray) -> str:
    """sha256 of the values in C order (so a changed header that reinterprets the
    same bytes changes it too)."""
    return hashlib.sha256(np.ascontiguousarray(array)).hexdigest()


def write_entry(path: Path, key: str, array: np.ndarray) -> None:
    """Store ``array`` (fp16) under ``path``: the array, then its sidecar."""
    if array.dtype != np.dtype(DTYPE):
        raise TypeError(f"feature cache entries are {DTYPE}, got {array.dtype}")
    replace_atomically(path, lambda f: np.save(f, array), binary=True)
    meta = {"key": key, "shape": list(array.shape), "dtype": DTYPE, "sha256": checksum(array)}
    replace_atomically(sidecar(path), lambda f: json.dump(meta, f))


def _meta(path: Path) -> dict:
    side = sidecar(path)
    if not side.exists():
        raise Damaged(f"its sidecar {side.name} is missing (an interrupted write, or "
                      "written by an older cl-bench)")
    try:
        meta = json.loads(side.read_text())
        if not (isinstance(meta["key"], str) and isinstance(meta["sha256"], str)
                and isinstance(meta["dtype"], str) and isinstance(meta["shape"], list)):
            raise TypeError("a field has the wrong type")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Damaged(f"its sidecar {side.name} is unreadable ({type(e).__name__}: {e})") from None
    return meta


def read_entry(path: Path, key: str | None = None,
               shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The verified (memory-mapped) array of the entry at ``path``, or
    :class:`Damaged`. ``key`` and ``shape``, when given, are what the caller
    expects; without them (``cache info``) the entry is checked against itself."""
    meta = _meta(path)
    if key is not None and meta["key"] != key:
        raise Damaged("its sidecar names another key")
    if not path.exists():
        raise Damaged("the array file is missing")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # numpy raises EOFError, ValueError, TokenError...: all mean damage
        raise Damaged(f"unreadable array ({type(e).__name__}: {e})") from None
    if list(array.shape) != meta["shape"]:
        raise Damaged(f"shape {tuple(array.shape)}, its sidecar says {tuple(meta['shape'])}")
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise Damaged(f"shape {tuple(array.shape)}, expected {tuple(shape)}")
    if str(array.dtype) != DTYPE or meta["dtype"] != DTYPE:
        raise Damaged(f"dtype {array.dtype} (sidecar: {meta['dtype']}), expected {DTYPE}")
    if checksum(array) != meta["sha256"]:
        raise Damaged("checksum mismatch: its bytes changed after it was written")
    if not np.isfinite(array).all():
        raise Damaged(f"{int((~np.isfinite(array)).sum())} non-finite values (NaN or inf)")
    return array


def remove_entry(path: Path) -> None:
    """Delete an entry, sidecar first (an array without sidecar is never read)."""
    sidecar(path).unlink(missing_ok=True)
    path.unlink(missing_ok=True)


def _is_temp(f: Path) -> bool:
    """A temp file of :func:`replace_atomically` left by a killed writer."""
    return f.name.startswith(".") and f.name.endswith(".tmp")


def cache_info() -> list[str]:
    """One line per cached array, one ``damaged: <file>: <why>`` line per damaged
    entry (each one is recomputed when a run needs it), then the totals."""
    root = cache_dir()
    files = sorted(root.glob("*/*")) if root.exists() else []
    arrays = [f for f in files if f.suffix == ".npy"]
    lines, total, damaged = [], 0, 0
    for f in arrays:
        total += f.stat().st_size
        try:
            shape = read_entry(f).shape
        except Damaged as e:
            damaged += 1
            lines.append(f"damaged: {f}: {e}")
            continue
        lines.append(f"{f.relative_to(root)}  {' x '.join(map(str, shape))}  "
                     f"{f.stat().st_size / 2**20:.1f} MiB")
    for side in files:
        if side.suffix == ".json" and not side.with_suffix(".npy").exists():
            damaged += 1
            lines.append(f"damaged: {side}: the array file is missing")
    temps = sum(map(_is_temp, files))
    lines.append(f"{len(arrays)} cached feature arrays ({damaged} damaged, {temps} stray temp "
                 f"files), {total / 2**20:.1f} MiB in {root}")
    return lines


def cache_clear() -> int:
    """Delete every cached array with its sidecar, lock and any stray temp file;
    returns how many arrays."""
    root = cache_dir()
    folders = [d for d in root.iterdir() if d.is_dir()] if root.exists() else []
    files = [f for d in folders for f in d.iterdir() if f.is_file()]
    for f in files:
        f.unlink(missing_ok=True)
    for d in folders:
        if not any(d.iterdir()):
            d.rmdir()
    return sum(1 for f in files if f.suffix == ".npy")
