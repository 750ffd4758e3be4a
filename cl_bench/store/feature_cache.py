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

A cache this process cannot write (a group's shared copy, mounted read-only or
owned by another account) is read all the same: reading takes no lock and
writes nothing (:func:`entry_write_problem`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from cl_bench.errors import UserError
from cl_bench.input_checks import nearest_existing, write_problem
from cl_bench.store.atomic import replace_atomically

DTYPE = "float16"


class Damaged(Exception):
    """A cache entry that must not be used; the message says what is wrong."""


def cache_dir() -> Path:
    """``$CL_BENCH_CACHE`` or ``~/.cache/cl-bench/features``."""
    return Path(
        os.environ.get("CL_BENCH_CACHE") or Path.home() / ".cache" / "cl-bench" / "features"
    )


def sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def entry_write_problem(path: Path) -> str | None:
    """Why the entry at ``path`` (or its lock) cannot be written here ("read-only",
    "Permission denied"), or None when it can: its folder, or the nearest folder above
    it that exists, takes no new file."""
    return write_problem(nearest_existing(Path(path).parent))


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
        raise Damaged(
            f"its sidecar {side.name} is missing (an interrupted write, or "
            "written by an older cl-bench)"
        )
    try:
        meta = json.loads(side.read_text())
        if not (
            isinstance(meta["key"], str)
            and isinstance(meta["sha256"], str)
            and isinstance(meta["dtype"], str)
            and isinstance(meta["shape"], list)
        ):
            raise TypeError("a field has the wrong type")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Damaged(f"its sidecar {side.name} is unreadable ({type(e).__name__}: {e})") from None
    return meta


def read_entry(
    path: Path, key: str | None = None, shape: tuple[int, ...] | None = None
) -> np.ndarray:
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
        lines.append(
            f"{f.relative_to(root)}  {' x '.join(map(str, shape))}  "
            f"{f.stat().st_size / 2**20:.1f} MiB"
        )
    for side in files:
        if side.suffix == ".json" and not side.with_suffix(".npy").exists():
            damaged += 1
            lines.append(f"damaged: {side}: the array file is missing")
    temps = sum(map(_is_temp, files))
    lines.append(
        f"{len(arrays)} cached feature arrays ({damaged} damaged, {temps} stray temp "
        f"files), {total / 2**20:.1f} MiB in {root}"
    )
    return lines


def cache_clear() -> int:
    """Delete every cached array with its sidecar, lock and any stray temp file;
    returns how many arrays. A cache with a folder that cannot be written is refused
    before anything is removed, naming the folders and why."""
    root = cache_dir()
    folders = sorted(d for d in root.iterdir() if d.is_dir()) if root.exists() else []
    files = [f for d in folders for f in sorted(d.iterdir()) if f.is_file()]
    check_clearable(root, folders)
    for removed, f in enumerate(files):
        try:
            f.unlink(missing_ok=True)
        except OSError as e:
            raise UserError(
                f"Cannot remove {f} from the feature cache ({e.strerror}); "
                f"{removed} of its {len(files)} files were removed before it, the "
                "others are in place. Fix what keeps it, then run `cl-bench cache "
                "clear` again."
            ) from None
    for d in folders:
        if not any(d.iterdir()):
            d.rmdir()
    return sum(1 for f in files if f.suffix == ".npy")


def check_clearable(root: Path, folders: list[Path]) -> None:
    """Refuse to clear a cache whose folders (or ``root``, which holds them) this
    process cannot write: a removal there fails, and clearing would stop half-way."""
    blocked = [
        (d, why)
        for d in ([root, *folders] if folders else [])
        if (why := write_problem(d)) is not None
    ]
    if not blocked:
        return
    named = "; ".join(f"{d} ({why})" for d, why in blocked[:3])
    more = f" and {len(blocked) - 3} more" if len(blocked) > 3 else ""
    raise UserError(
        f"Cannot clear the feature cache {root}: {named}{more} cannot be written, "
        "so its files cannot be removed; nothing was removed. Clear it where it "
        "can be written (as its owner, or on a machine that mounts it read-write), "
        "or point $CL_BENCH_CACHE at a cache of your own."
    )
