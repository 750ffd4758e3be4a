"""Build the small Fashion-MNIST subset that ships inside the package.

The full set (60k/10k) is too big to embed, but tests, the quick-start and CI need a
real image dataset that works offline. This script takes, per class, the first 500
training and the first 100 test images in file order (so it is deterministic), keeps
them in their original file order and writes ``cl_bench/data/fmnist_subset.npz``.

Usage::

    python scripts/make_fmnist_subset.py [--src /usr/share/datasets/fashion-mnist]
                                         [--out cl_bench/data/fmnist_subset.npz]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import struct
import sys
from pathlib import Path

import numpy as np

DEFAULT_SRC = Path("/usr/share/datasets/fashion-mnist")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "cl_bench" / "data" / "fmnist_subset.npz"
TRAIN_PER_CLASS = 500
TEST_PER_CLASS = 100
N_CLASSES = 10


def read_idx(path: Path) -> np.ndarray:
    """Read a gzip IDX file; standalone so the script does not import the package."""
    raw = gzip.decompress(path.read_bytes())
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise SystemExit(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise SystemExit(f"{path}: expected {int(np.prod(dims))} values, found {data.size}")
    return data.reshape(dims)


def first_per_class(labels: np.ndarray, per_class: int) -> np.ndarray:
    """Indices of the first ``per_class`` items of each class, in file order."""
    keep = []
    for c in range(N_CLASSES):
        idx = np.flatnonzero(labels == c)[:per_class]
        if idx.size != per_class:
            raise SystemExit(f"class {c} has only {idx.size} items, need {per_class}")
        keep.append(idx)
    return np.sort(np.concatenate(keep))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC, help="folder with the 4 .gz files")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output .npz path")
    args = parser.parse_args(argv)

    arrays: dict[str, np.ndarray] = {}
    for split, prefix, per_class in (
        ("train", "train", TRAIN_PER_CLASS),
        ("test", "t10k", TEST_PER_CLASS),
    ):
        x = read_idx(args.src / f"{prefix}-images-idx3-ubyte.gz")
        y = read_idx(args.src / f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
        keep = first_per_class(y, per_class)
        arrays[f"{split}_x"] = np.ascontiguousarray(x[keep])
        arrays[f"{split}_y"] = np.ascontiguousarray(y[keep])

    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    for k, v in arrays.items():
        print(f"{k}: {v.dtype} {v.shape}")
    print(f"train per class: {np.bincount(arrays['train_y']).tolist()}")
    print(f"test per class:  {np.bincount(arrays['test_y']).tolist()}")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes), sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
