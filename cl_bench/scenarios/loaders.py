"""Dataset loaders: each returns an :class:`ImageData` with a fixed train/test split.

All loaders are pure (no network, nothing written) and fast, so tests and the CLI can
call them freely. ``fmnist`` uses a small subset embedded in the package so that the
suite runs offline; ``fmnist-full`` reads the Debian ``dataset-fashion-mnist`` files.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from cl_bench.errors import UserError
from cl_bench.scenarios.image_data import ImageData

FMNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
FMNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
FMNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
FMNIST_SUBSET = Path(__file__).resolve().parent.parent / "data" / "fmnist_subset.npz"

_REINSTALL = "sudo apt-get install --reinstall dataset-fashion-mnist"
_INSTALL = "sudo apt-get install dataset-fashion-mnist"


def _corrupt(path: Path, why: str) -> UserError:
    """The one error for any unreadable IDX file, so users get the same fix every time."""
    return UserError(
        f"The IDX file {path} is corrupt or truncated ({why}). Reinstall the Debian "
        f"package with `{_REINSTALL}`, or pass `--data-root DIR` pointing to a folder "
        f"with intact copies of the four Fashion-MNIST .gz files."
    )


def load_idx(path: Path | str) -> torch.Tensor:
    """Read a gzip-compressed unsigned-byte IDX file into a uint8 tensor.

    Checks the magic number and that the payload size matches the header exactly, so a
    damaged download fails loudly here instead of as a shape error deep in training.
    """
    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error) as exc:
        raise _corrupt(path, f"gzip: {exc}") from exc
    if len(raw) < 4:
        raise _corrupt(path, "header too short")
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08 or not 1 <= ndim <= 4:
        raise _corrupt(path, f"bad magic number 0x{raw[:4].hex()}, expected 0x000008NN")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise _corrupt(path, "header too short")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != expected:
        raise _corrupt(
            path, f"header says shape {tuple(dims)} = {expected} bytes, found {len(raw) - header}"
        )
    data = np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)
    return torch.from_numpy(data.copy())


def fmnist(data_root: Path | None = None) -> ImageData:
    """The embedded Fashion-MNIST subset (500 train / 100 test per class, 28x28).

    ``data_root`` is accepted for a uniform loader signature and ignored: the subset
    always comes from the package, so results are comparable across machines.
    """
    del data_root
    if not FMNIST_SUBSET.is_file():
        raise UserError(
            f"The embedded Fashion-MNIST subset {FMNIST_SUBSET} is missing; the package "
            f"installation is incomplete. Reinstall cl-bench, or regenerate the file with "
            f"`python scripts/make_fmnist_subset.py`."
        )
    with np.load(FMNIST_SUBSET) as z:
        arrays = {k: torch.from_numpy(z[k]) for k in ("train_x", "train_y", "test_x", "test_y")}
    return ImageData(name="fmnist", class_names=list(FMNIST_CLASSES), **arrays)


def find_fmnist_dir(data_root: Path | None) -> Path:
    """Where the four .gz files are: ``data_root``, ``data_root/fashion-mnist`` or Debian's."""
    candidates = (
        [FMNIST_SYSTEM_DIR] if data_root is None else [data_root, data_root / "fashion-mnist"]
    )
    for folder in candidates:
        if all((folder / f).is_file() for f in FMNIST_FILES):
            return folder
    where = " or ".join(str(c) for c in candidates)
    raise UserError(
        f"The full Fashion-MNIST files were not found in {where}. Expected the four files "
        f"{', '.join(FMNIST_FILES)}. Install them with `{_INSTALL}` (they go to "
        f"{FMNIST_SYSTEM_DIR}), or pass `--data-root DIR` with DIR holding the four files "
        f"(directly or in a fashion-mnist/ subfolder). The embedded subset `fmnist` needs "
        f"no download."
    )


def fmnist_full(data_root: Path | None = None) -> ImageData:
    """The complete Fashion-MNIST (60,000 train / 10,000 test), read from IDX files."""
    folder = find_fmnist_dir(None if data_root is None else Path(data_root))
    train_x, train_y, test_x, test_y = (load_idx(folder / f) for f in FMNIST_FILES)
    for x, y in ((train_x, train_y), (test_x, test_y)):
        if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise _corrupt(folder, f"images {tuple(x.shape)} do not match labels {tuple(y.shape)}")
    return ImageData(
        name="fmnist-full",
        train_x=train_x,
        train_y=train_y.long(),
        test_x=test_x,
        test_y=test_y.long(),
        class_names=list(FMNIST_CLASSES),
    )


def digits(data_root: Path | None = None) -> ImageData:
    """scikit-learn's 8x8 digits (ships with sklearn, so always offline), as uint8 0..255.

    Split: within each class, every 5th image (index % 5 == 4) is test, the rest train;
    stratified and deterministic without any random state.
    """
    del data_root
    from sklearn.datasets import load_digits  # local: sklearn import is slow

    d = load_digits()
    images = (d.images.astype(np.int64) * 255 + 8) // 16  # 0..16 -> 0..255, rounded
    x = torch.from_numpy(images.astype(np.uint8))
    y = torch.from_numpy(d.target.astype(np.int64))
    is_test = torch.zeros(len(y), dtype=torch.bool)
    for c in range(10):
        idx = torch.nonzero(y == c).flatten()
        is_test[idx[4::5]] = True
    return ImageData(
        name="digits",
        train_x=x[~is_test].contiguous(),
        train_y=y[~is_test].contiguous(),
        test_x=x[is_test].contiguous(),
        test_y=y[is_test].contiguous(),
        class_names=[str(c) for c in range(10)],
    )


def synthetic(
    data_root: Path | None = None,
    n_classes: int = 10,
    train_per_class: int = 24,
    test_per_class: int = 8,
    size: int = 32,
    seed: int = 0,
) -> ImageData:
    """Tiny generated colour dataset for smoke tests: learnable, instant, byte-reproducible.

    Each class is a fixed random 4x4x3 colour pattern, bilinearly upsampled to ``size``;
    every image is its class pattern, circularly shifted by up to size/8 pixels, plus
    Gaussian noise. Everything comes from one seeded ``torch.Generator`` on the CPU.
    """
    del data_root
    if n_classes < 1 or train_per_class < 1 or test_per_class < 1 or size < 4:
        raise UserError(
            "synthetic needs n_classes, train_per_class and test_per_class >= 1 and size >= 4; "
            f"got n_classes={n_classes}, train_per_class={train_per_class}, "
            f"test_per_class={test_per_class}, size={size}."
        )
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n_classes, 3, 4, 4, generator=g)
    patterns = F.interpolate(base, size=(size, size), mode="bilinear", align_corners=False)
    max_shift = max(1, size // 8)

    def make(per_class: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n_classes).repeat_interleave(per_class)
        n = len(y)
        shifts = torch.randint(-max_shift, max_shift + 1, (n, 2), generator=g)
        noise = torch.randn(n, 3, size, size, generator=g) * 0.12
        x = torch.empty(n, 3, size, size)
        for i in range(n):
            dy, dx = int(shifts[i, 0]), int(shifts[i, 1])
            x[i] = torch.roll(patterns[int(y[i])], shifts=(dy, dx), dims=(1, 2))
        x = ((x + noise).clamp(0, 1) * 255).round().to(torch.uint8)
        return x, y

    train_x, train_y = make(train_per_class)
    test_x, test_y = make(test_per_class)
    return ImageData(
        name="synthetic",
        train_x=train_x,
        train_y=train_y,
        test_x=test_x,
        test_y=test_y,
        class_names=[f"class_{c:02d}" for c in range(n_classes)],
    )


LOADERS: dict[str, Callable[..., ImageData]] = {
    "fmnist": fmnist,
    "fmnist-full": fmnist_full,
    "digits": digits,
    "synthetic": synthetic,
}
