"""Tests for the dataset loaders: shapes, splits, determinism and user-facing errors."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from cl_bench.errors import UserError
from cl_bench.scenarios import loaders as datasets
from cl_bench.scenarios.image_data import ImageData
from cl_bench.scenarios.loaders import (
    FMNIST_CLASSES,
    FMNIST_FILES,
    FMNIST_SYSTEM_DIR,
    LOADERS,
    digits,
    fmnist,
    fmnist_full,
    load_idx,
    synthetic,
)

HAVE_DEBIAN_FMNIST = all((FMNIST_SYSTEM_DIR / f).is_file() for f in FMNIST_FILES)
needs_debian = pytest.mark.skipif(
    not HAVE_DEBIAN_FMNIST,
    reason=f"full Fashion-MNIST not installed in {FMNIST_SYSTEM_DIR} "
    "(sudo apt-get install dataset-fashion-mnist)",
)


def write_idx(path: Path, array: np.ndarray) -> None:
    """A minimal IDX writer for the tests (uint8 only)."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def check_common(d: ImageData, n_classes: int) -> None:
    """Invariants every loader promises: uint8 images, int64 labels in range, a fingerprint."""
    assert d.train_x.dtype == torch.uint8 and d.test_x.dtype == torch.uint8
    assert d.train_y.dtype == torch.int64 and d.test_y.dtype == torch.int64
    assert d.train_x.shape[0] == d.train_y.shape[0]
    assert d.test_x.shape[0] == d.test_y.shape[0]
    assert d.train_x.shape[1:] == d.test_x.shape[1:]
    assert d.n_classes == n_classes
    for y in (d.train_y, d.test_y):
        assert int(y.min()) >= 0 and int(y.max()) < n_classes
    assert len(d.fingerprint) == 16


def test_loaders_registry() -> None:
    assert set(LOADERS) == {"fmnist", "fmnist-full", "digits", "synthetic"}
    assert LOADERS["fmnist"] is fmnist and LOADERS["fmnist-full"] is fmnist_full


# --- fmnist (embedded subset) ---------------------------------------------------------


def test_fmnist_subset_shapes_and_counts() -> None:
    d = fmnist()
    check_common(d, 10)
    assert d.name == "fmnist"
    assert d.class_names == FMNIST_CLASSES
    assert tuple(d.train_x.shape) == (5000, 28, 28)
    assert tuple(d.test_x.shape) == (1000, 28, 28)
    assert torch.bincount(d.train_y).tolist() == [500] * 10
    assert torch.bincount(d.test_y).tolist() == [100] * 10
    # kept in original file order, not grouped by class
    assert not bool((d.train_y[1:] >= d.train_y[:-1]).all())


def test_fmnist_fingerprint_stable_and_data_root_ignored(tmp_path: Path) -> None:
    assert fmnist().fingerprint == fmnist(tmp_path).fingerprint


@needs_debian
def test_fmnist_subset_matches_full_set() -> None:
    sub, full = fmnist(), fmnist_full()
    for split, per_class in (("train", 500), ("test", 100)):
        full_y = getattr(full, f"{split}_y")
        keep = (
            torch.cat([torch.nonzero(full_y == c).flatten()[:per_class] for c in range(10)])
            .sort()
            .values
        )
        assert torch.equal(getattr(sub, f"{split}_x"), getattr(full, f"{split}_x")[keep])
        assert torch.equal(getattr(sub, f"{split}_y"), full_y[keep])


# --- fmnist-full -----------------------------------------------------------------------


@needs_debian
def test_fmnist_full_shapes() -> None:
    d = fmnist_full()
    check_common(d, 10)
    assert d.name == "fmnist-full"
    assert tuple(d.train_x.shape) == (60000, 28, 28)
    assert tuple(d.test_x.shape) == (10000, 28, 28)
    assert torch.bincount(d.test_y).tolist() == [1000] * 10


def make_fake_fmnist(folder: Path) -> None:
    """Four tiny valid IDX files with the Fashion-MNIST names."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("t10k", 10)):
        write_idx(folder / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        write_idx(folder / f"{split}-labels-idx1-ubyte.gz", np.arange(n) % 10)


@pytest.mark.parametrize("sub", ["", "fashion-mnist"])
def test_fmnist_full_from_data_root(tmp_path: Path, sub: str) -> None:
    make_fake_fmnist(tmp_path / sub if sub else tmp_path)
    d = fmnist_full(tmp_path)
    check_common(d, 10)
    assert tuple(d.train_x.shape) == (20, 28, 28)
    assert d.test_y.tolist() == list(range(10))


def test_fmnist_full_missing_folder_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(UserError) as exc:
        fmnist_full(missing)
    msg = str(exc.value)
    assert str(missing) in msg
    assert "sudo apt-get install dataset-fashion-mnist" in msg
    assert "--data-root" in msg
    for f in FMNIST_FILES:
        assert f in msg


def test_fmnist_full_system_dir_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(datasets, "FMNIST_SYSTEM_DIR", tmp_path / "absent")
    with pytest.raises(UserError, match="apt-get install dataset-fashion-mnist"):
        fmnist_full()


def test_fmnist_full_corrupt_file_error(tmp_path: Path) -> None:
    make_fake_fmnist(tmp_path)
    bad = tmp_path / "t10k-images-idx3-ubyte.gz"
    bad.write_bytes(bad.read_bytes()[:-20])
    with pytest.raises(UserError) as exc:
        fmnist_full(tmp_path)
    assert str(bad) in str(exc.value) and "reinstall" in str(exc.value)


# --- IDX reader ------------------------------------------------------------------------


def test_load_idx_roundtrip(tmp_path: Path) -> None:
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "x.gz", arr)
    t = load_idx(tmp_path / "x.gz")
    assert t.dtype == torch.uint8 and tuple(t.shape) == (2, 3, 4)
    assert t.numpy().tolist() == arr.tolist()
    write_idx(tmp_path / "y.gz", np.array([3, 1, 4], dtype=np.uint8))
    assert load_idx(str(tmp_path / "y.gz")).tolist() == [3, 1, 4]


def _corruptions(tmp_path: Path) -> dict[str, Path]:
    arr = np.zeros((4, 5, 5), dtype=np.uint8)
    write_idx(tmp_path / "good.gz", arr)
    good = (tmp_path / "good.gz").read_bytes()
    raw = gzip.decompress(good)
    cases = {
        "truncated_gzip": good[: len(good) // 2],
        "not_gzip": b"this is not gzip data at all",
        "short_payload": gzip.compress(raw[:-7]),
        "long_payload": gzip.compress(raw + b"\x00"),
        "bad_magic": gzip.compress(b"\x00\x00\x0d\x03" + raw[4:]),
        "header_only": gzip.compress(b"\x00\x00"),
        "empty": b"",
    }
    out = {}
    for name, data in cases.items():
        out[name] = tmp_path / f"{name}.gz"
        out[name].write_bytes(data)
    return out


@pytest.mark.parametrize(
    "case",
    [
        "truncated_gzip",
        "not_gzip",
        "short_payload",
        "long_payload",
        "bad_magic",
        "header_only",
        "empty",
    ],
)
def test_load_idx_corrupt(tmp_path: Path, case: str) -> None:
    path = _corruptions(tmp_path)[case]
    with pytest.raises(UserError) as exc:
        load_idx(path)
    msg = str(exc.value)
    assert str(path) in msg
    assert "apt-get install --reinstall dataset-fashion-mnist" in msg


# --- digits ----------------------------------------------------------------------------


def test_digits_shapes_and_split_rule() -> None:
    from sklearn.datasets import load_digits

    d = digits()
    check_common(d, 10)
    assert d.name == "digits"
    assert tuple(d.train_x.shape[1:]) == (8, 8)
    assert len(d.train_y) + len(d.test_y) == 1797
    assert int(d.train_x.max()) == 255 and int(d.train_x.min()) == 0

    ref = load_digits()
    ref_x = (ref.images.astype(np.int64) * 255 + 8) // 16
    for c in range(10):
        idx = np.flatnonzero(ref.target == c)
        test_idx, train_idx = idx[4::5], np.setdiff1d(idx, idx[4::5])
        assert int((d.test_y == c).sum()) == len(test_idx) == len(idx) // 5
        assert np.array_equal(d.test_x[d.test_y == c].numpy(), ref_x[test_idx])
        assert np.array_equal(d.train_x[d.train_y == c].numpy(), ref_x[train_idx])


def test_digits_fingerprint_stable() -> None:
    assert digits().fingerprint == digits().fingerprint


# --- synthetic -------------------------------------------------------------------------


def test_synthetic_shapes_and_counts() -> None:
    d = synthetic(n_classes=5, train_per_class=7, test_per_class=3, size=16)
    check_common(d, 5)
    assert d.name == "synthetic"
    assert d.class_names == [f"class_{c:02d}" for c in range(5)]
    assert tuple(d.train_x.shape) == (35, 3, 16, 16)
    assert tuple(d.test_x.shape) == (15, 3, 16, 16)
    assert torch.bincount(d.train_y).tolist() == [7] * 5
    assert torch.bincount(d.test_y).tolist() == [3] * 5
    default = synthetic()
    assert tuple(default.train_x.shape) == (240, 3, 32, 32)
    assert tuple(default.test_x.shape) == (80, 3, 32, 32)


def test_synthetic_deterministic() -> None:
    a, b = synthetic(seed=3), synthetic(seed=3)
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_x, b.test_x)
    assert a.fingerprint == b.fingerprint
    c = synthetic(seed=4)
    assert not torch.equal(a.train_x, c.train_x)
    assert a.fingerprint != c.fingerprint


def test_synthetic_does_not_touch_global_rng() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    synthetic()
    assert torch.equal(torch.rand(3), expected)


def test_synthetic_bad_arguments() -> None:
    with pytest.raises(UserError):
        synthetic(n_classes=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthetic_is_learnable(seed: int) -> None:
    """Nearest class mean on raw pixels; chance is 0.10. Measured: >= 0.9875 for seeds 0..199."""
    d = synthetic(seed=seed)
    x_tr, x_te = d.train_x.flatten(1).float(), d.test_x.flatten(1).float()
    means = torch.stack([x_tr[d.train_y == c].mean(0) for c in range(d.n_classes)])
    acc = (torch.cdist(x_te, means).argmin(1) == d.test_y).float().mean().item()
    assert acc >= 0.9
