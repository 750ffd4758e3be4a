"""The on-disk feature cache is verified, not trusted: every kind of damaged entry
is reported, deleted and recomputed (a run's numbers equal a clean run's), `cache
info` names it, `cache clear` removes everything, and the key carries the version
of the feature code."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cl_bench.engine import features
from cl_bench.engine.features import FeatureStore
from cl_bench.store.feature_cache import Damaged, read_entry, sidecar, write_entry
from tests.helpers.cli import invoke
from tests.helpers.features import fake_parts

CPU = torch.device("cpu")
KEY = "('fake', 'train')"
# synthetic at 32 px keeps each recomputation short
RUN = [
    "--methods",
    "simplecil",
    "--scenario",
    "synthetic",
    "--image-size",
    "32",
    "--no-progress",
    "--precision",
    "fp32",
]


def garble_data(path: Path) -> None:
    """Flip the last 16 bytes (values, not header): same size, same shape."""
    raw = bytearray(path.read_bytes())
    raw[-16:] = bytes(b ^ 0x5A for b in raw[-16:])
    path.write_bytes(bytes(raw))


def garble_header(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[10:20] = b"\x00garbage!!"
    path.write_bytes(bytes(raw))


def nan_stale(path: Path) -> None:
    """A NaN written into the array; the sidecar's checksum is the old one."""
    array = np.load(path, mmap_mode="r+")
    array[0, 0] = np.nan
    array.flush()


def nan_matching(path: Path) -> None:
    """A NaN, with a sidecar written for it (checksum matches)."""
    array = np.load(path).copy()
    array[1, 1] = np.nan
    write_entry(path, json.loads(sidecar(path).read_text())["key"], array)


def wrong_shape(path: Path) -> None:
    """One row short, with a consistent sidecar (as the truncated digits array was)."""
    write_entry(path, json.loads(sidecar(path).read_text())["key"], np.load(path)[:-1].copy())


# kind -> (damage, why as the warning and `cache info` give it, for an entry of
# (rows, dim) with sidecar {name})
DAMAGES = {
    "garbled bytes": (garble_data, "checksum mismatch: its bytes changed after it was written"),
    "garbled header": (garble_header, "unreadable array ("),
    "NaN, stale checksum": (nan_stale, "checksum mismatch"),
    "NaN, matching checksum": (nan_matching, "1 non-finite values (NaN or inf)"),
    "zero bytes": (
        lambda p: p.write_bytes(b""),
        "unreadable array (EOFError: No data left in file)",
    ),
    "wrong shape": (wrong_shape, "shape ({short}, {dim}), expected ({rows}, {dim})"),
    "missing sidecar": (lambda p: sidecar(p).unlink(), "its sidecar {name} is missing"),
    "missing array": (lambda p: p.unlink(), "the array file is missing"),
}


def entry(tmp_path: Path, rows: int = 4, name: str = "a") -> Path:
    path = tmp_path / "bb" / f"{name}.npy"
    write_entry(path, KEY, np.arange(rows * 3, dtype=np.float16).reshape(rows, 3))
    return path


def why(kind: str, path: Path, rows: int, dim: int = 3) -> str:
    return DAMAGES[kind][1].format(rows=rows, short=rows - 1, dim=dim, name=sidecar(path).name)


def test_entry_round_trip_and_sidecar(tmp_path):
    path = entry(tmp_path)
    meta = json.loads(sidecar(path).read_text())
    assert meta["key"] == KEY and meta["shape"] == [4, 3] and meta["dtype"] == "float16"
    assert len(meta["sha256"]) == 64
    assert read_entry(path, KEY, (4, 3)).tolist() == np.arange(12).reshape(4, 3).tolist()
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json", "a.npy"]  # no temp files


@pytest.mark.parametrize("kind", DAMAGES)
def test_each_damage_is_refused_with_its_reason(tmp_path, kind):
    path = entry(tmp_path)
    DAMAGES[kind][0](path)
    with pytest.raises(Damaged) as e:
        read_entry(path, KEY, (4, 3))
    assert str(e.value).startswith(why(kind, path, 4)), str(e.value)


def test_an_entry_is_checked_against_the_callers_key_and_shape(tmp_path):
    path = entry(tmp_path)
    with pytest.raises(Damaged, match="its sidecar names another key"):
        read_entry(path, "('other',)", (4, 3))
    with pytest.raises(Damaged, match=r"shape \(4, 3\), expected \(4, 5\)"):
        read_entry(path, KEY, (4, 5))


@pytest.mark.parametrize("kind", DAMAGES)
def test_store_warns_deletes_and_recomputes_a_damaged_entry(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path))
    calls, warned = [], []
    extract, backbone, data = fake_parts(calls)
    monkeypatch.setattr(features, "extract", extract)
    first = FeatureStore(CPU, progress=False).get(backbone, data, "train")
    store = FeatureStore(CPU, progress=False, warn=warned.append)
    path = store.path(store.key(backbone, data, "train"))
    DAMAGES[kind][0](path)
    again = store.get(backbone, data, "train")
    assert torch.equal(again, first) and calls == [5, 5] and store.hits == 0
    assert len(warned) == 1 and warned[0].startswith(
        f"warning: feature cache entry {path} is damaged ({why(kind, path, 5, 2)}"
    ), warned
    assert warned[0].endswith("deleted, recomputing it")
    # the recomputed entry is whole again: the next store reads it
    later = FeatureStore(CPU, progress=False, warn=warned.append)
    assert torch.equal(later.get(backbone, data, "train"), first)
    assert later.hits == 1 and calls == [5, 5] and len(warned) == 1


def test_non_finite_features_are_refused_and_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path))
    _, backbone, data = fake_parts([])
    monkeypatch.setattr(
        features,
        "extract",
        lambda backbone, images, device, **kw: torch.full((len(images), 2), 1e6),
    )
    warned = []
    store = FeatureStore(CPU, progress=False, warn=warned.append)
    with pytest.raises(features.NonFiniteFeatures, match=r"fake test hold \d+ NaN or inf"):
        store.get(backbone, data, "test")  # 1e6 overflows fp16
    assert warned == [] and list(tmp_path.rglob("*.npy")) == []


def test_the_features_version_is_part_of_the_key(monkeypatch):
    _, backbone, data = fake_parts([])
    store = FeatureStore(CPU, progress=False)
    before = store.path(store.key(backbone, data, "train"))
    assert f"features-v{features.FEATURES_VERSION}" in store.key(backbone, data, "train")
    monkeypatch.setattr(features, "FEATURES_VERSION", features.FEATURES_VERSION + 1)
    after = store.path(store.key(backbone, data, "train"))
    assert after != before and after.parent == before.parent


def test_cache_info_names_each_damaged_entry_and_clear_removes_everything(tmp_path, monkeypatch):
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path))
    good = entry(tmp_path, name="good")
    damaged = {kind: entry(tmp_path, name=f"d{i}") for i, kind in enumerate(DAMAGES)}
    for kind, path in damaged.items():
        DAMAGES[kind][0](path)
    (tmp_path / "bb" / ".x.npy.abc123.tmp").write_bytes(b"partial")  # a killed writer's
    (tmp_path / "bb" / "good.lock").write_bytes(b"")
    result = invoke("cache", "info")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for kind, path in damaged.items():
        if kind == "wrong shape":  # consistent with its sidecar: only a run knows the shape
            assert f"bb/{path.name}  3 x 3  0.0 MiB" in lines
            continue
        named = path if kind != "missing array" else sidecar(path)
        assert any(line.startswith(f"damaged: {named}: {why(kind, path, 4)}") for line in lines), (
            kind,
            lines,
        )
    assert "bb/good.npy  4 x 3  0.0 MiB" in lines
    assert len(lines) == 1 + len(DAMAGES) + 1
    # 8 arrays: the good one + every damaged one but "missing array" (an orphan sidecar)
    assert lines[-1] == (
        f"8 cached feature arrays (7 damaged, 1 stray temp files), 0.0 MiB in {tmp_path}"
    )
    result = invoke("cache", "clear")
    assert result.exit_code == 0 and result.stdout == "removed 8 cached feature arrays\n"
    assert list(tmp_path.iterdir()) == [] and not good.exists()
    assert invoke("cache", "info").stdout == (
        f"0 cached feature arrays (0 damaged, 0 stray temp files), 0.0 MiB in {tmp_path}\n"
    )


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """SimpleCIL on synthetic with a cold cache of this module's own."""
    mp = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("damage_cache")
    mp.setenv("CL_BENCH_CACHE", str(cache))
    out = tmp_path_factory.mktemp("clean")
    result = invoke("run", "--out", str(out), *RUN)
    assert result.exit_code == 0, result.output
    yield cache, json.loads(next(out.glob("runs/*/*/*.json")).read_text())
    mp.undo()


def numbers(record: dict) -> dict:
    return {
        k: record[k]
        for k in (
            "status",
            "acc_matrix",
            "acc_seen",
            "avg_acc",
            "last_acc",
            "forgetting",
            "class_order",
        )
    }


def test_clean_run_numbers(clean_run):
    _, record = clean_run
    assert record["status"] == "done" and record["timing"]["features_from"] == "extracted"
    assert (round(record["avg_acc"], 2), round(record["last_acc"], 2)) == (89.75, 80.0)


# Through a whole run, the three damages users met (silently wrong numbers, "Aborted.",
# a traceback) and NaN; the store test above covers every kind at the same seam.
@pytest.mark.parametrize(
    "kind", ["garbled bytes", "zero bytes", "wrong shape", "NaN, matching checksum"]
)
def test_run_recomputes_a_damaged_entry_and_gets_the_clean_numbers(clean_run, tmp_path, kind):
    cache, clean = clean_run
    test_entry = next(p for p in cache.glob("*/*.json") if ", 'test', " in p.read_text())
    path = test_entry.with_suffix(".npy")
    DAMAGES[kind][0](path)
    result = invoke("run", "--out", str(tmp_path), *RUN)
    assert result.exit_code == 0, result.output
    warning = f"warning: feature cache entry {path} is damaged ({why(kind, path, 80, 1280)}"
    assert warning in result.stderr, result.stderr
    assert result.stderr.count("warning: feature cache entry") == 1
    record = json.loads(next(tmp_path.glob("runs/*/*/*.json")).read_text())
    assert numbers(record) == numbers(clean)
    assert record["timing"]["features_from"] == "extracted"
    assert read_entry(path).shape == (80, 1280)  # whole again
    info = invoke("cache", "info").stdout.splitlines()
    assert not any(line.startswith("damaged") for line in info) and "(0 damaged" in info[-1]


def test_extraction_keeps_no_tensor_per_batch(monkeypatch):
    """Each batch's features are copied into the one result array and released before
    the next batch: kept small tensors between large transient image buffers fragment
    the heap (the default run grew by 3 GB over its 5,000 images). The result is the
    batches' features in order, in their dtype."""
    import weakref

    alive: list[weakref.ref] = []
    seen_alive: list[int] = []

    def fake_pass(backbone, x):
        seen_alive.append(sum(r() is not None for r in alive))
        f = x.flatten(1)[:, :3].to(torch.bfloat16) * 2
        alive.append(weakref.ref(f))
        return f

    monkeypatch.setattr(features, "frozen_features", fake_pass)
    backbone = SimpleNamespace(input_size=4, dim=3)
    images = torch.arange(10 * 16, dtype=torch.float32).reshape(10, 1, 4, 4)
    out = features.extract(
        backbone, images, CPU, transform=lambda x: x, batch_size=3, progress=False
    )
    assert seen_alive == [0, 0, 0, 0]  # four batches, none kept while the next runs
    assert out.dtype == torch.bfloat16 and out.shape == (10, 3)
    assert torch.equal(out, (images.flatten(1)[:, :3] * 2).to(torch.bfloat16))
