"""A feature cache this process cannot write (a group's shared copy, mounted read-only):
a run reads every entry it holds without a lock and writes nothing there; what it
lacks, or holds damaged, is extracted for the invocation and kept in memory, with a
note; `cache clear` refuses it, naming the folders and why, and removes nothing.

The tests run as root in CI, and root ignores permission bits: the folders are
chmod'ed read-only (what the kernel refuses to any other user) and the write probe
(:func:`cl_bench.input_checks.write_problem`) is refused there as a read-only mount
refuses it; every test then checks that nothing in the cache changed."""

from __future__ import annotations

import errno
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from cl_bench.store import feature_cache
from tests.helpers.cli import invoke, refused

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


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder below ``root`` with its size and modification time."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def read_only(monkeypatch):
    """``freeze(folder)``: the folder and everything below it become read-only."""
    frozen: list[Path] = []
    probe = tempfile.TemporaryFile

    def refused_below(*args, dir=None, **kwargs):  # noqa: A002 (tempfile's own name)
        if dir is not None and any(Path(dir).is_relative_to(f) for f in frozen):
            raise OSError(errno.EROFS, "Read-only file system")
        return probe(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", refused_below)

    def freeze(folder: Path) -> None:
        frozen.append(folder)
        for d in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
            d.chmod(0o555)

    yield freeze
    for folder in frozen:
        for d in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
            if d.exists():  # a failing test may have removed it
                d.chmod(0o755)


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[Path, dict]:
    """A cache filled by a SimpleCIL run (without its lock files, as a shared copy is
    made) and that run's record."""
    cache, out = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("out")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CL_BENCH_CACHE", str(cache))
        result = invoke("run", "--out", str(out), *RUN)
    assert result.exit_code == 0, result.output
    for lock in cache.rglob("*.lock"):
        lock.unlink()
    (record,) = [json.loads(p.read_text()) for p in out.glob("runs/*/*/*.json")]
    return cache, record


def copy_of(cache: Path, tmp_path: Path, monkeypatch) -> Path:
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    monkeypatch.setenv("CL_BENCH_CACHE", str(copy))
    return copy


def run_record(out: Path) -> dict:
    (record,) = [json.loads(p.read_text()) for p in out.glob("runs/*/*/*.json")]
    return record


def same_numbers(record: dict, reference: dict) -> None:
    for key in ("acc_matrix", "avg_acc", "last_acc", "config"):
        assert record[key] == reference[key], key


def test_a_read_only_cache_holding_every_entry_serves_the_run(
    filled, tmp_path, monkeypatch, read_only
):
    cache = copy_of(filled[0], tmp_path, monkeypatch)
    read_only(cache)
    before = snapshot(cache)
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), *RUN)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    record = run_record(out)
    assert record["timing"]["features_from"] == "disk cache"
    same_numbers(record, filled[1])
    assert snapshot(cache) == before  # no lock file, no entry, nothing touched


def test_what_a_read_only_cache_lacks_is_extracted_in_memory(
    tmp_path, monkeypatch, read_only, filled
):
    cache = tmp_path / "cache"
    (cache / "efficientnet_lite0").mkdir(parents=True)
    monkeypatch.setenv("CL_BENCH_CACHE", str(cache))
    read_only(cache)
    before = snapshot(cache)
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), *RUN)
    assert result.exit_code == 0, result.output
    notes = result.stderr.splitlines()
    assert len(notes) == 2 and all(
        n.startswith(
            f"note: the feature cache {cache} cannot be written (read-only): efficientnet_lite0 "
            "features of synthetic "
        )
        for n in notes
    ), notes
    assert notes[0].endswith(
        " train were extracted for this invocation only. To share them, "
        "run the command once where the cache can be written."
    )
    record = run_record(out)
    assert record["timing"]["features_from"] == "extracted"
    same_numbers(record, filled[1])
    assert snapshot(cache) == before


def test_a_damaged_entry_of_a_read_only_cache_is_recomputed_and_left(
    filled, tmp_path, monkeypatch, read_only
):
    cache = copy_of(filled[0], tmp_path, monkeypatch)
    entry = sorted(cache.rglob("*.npy"))[0]
    entry.write_bytes(entry.read_bytes()[:-16])
    read_only(cache)
    before = snapshot(cache)
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), *RUN)
    assert result.exit_code == 0, result.output
    assert f"warning: feature cache entry {entry} is damaged (" in result.stderr
    assert "); recomputing it\n" in result.stderr and "deleted" not in result.stderr
    same_numbers(run_record(out), filled[1])
    assert snapshot(cache) == before


def test_cache_clear_refuses_a_read_only_cache_and_removes_nothing(
    filled, tmp_path, monkeypatch, read_only
):
    cache = copy_of(filled[0], tmp_path, monkeypatch)
    read_only(cache)
    before = snapshot(cache)
    refused(
        invoke("cache", "clear"),
        f"Cannot clear the feature cache {cache}: {cache} (read-only); "
        f"{cache / 'efficientnet_lite0'} (read-only) cannot be written, so its files "
        "cannot be removed; nothing was removed. Clear it where it can be written (as its "
        "owner, or on a machine that mounts it read-write), or point $CL_BENCH_CACHE at a "
        "cache of your own.",
    )
    assert snapshot(cache) == before


def test_cache_clear_refuses_one_read_only_folder_before_removing_any(
    filled, tmp_path, monkeypatch, read_only
):
    cache = copy_of(filled[0], tmp_path, monkeypatch)
    shutil.copytree(cache / "efficientnet_lite0", cache / "a_backbone")
    read_only(cache / "efficientnet_lite0")
    before = snapshot(cache)
    refused(
        invoke("cache", "clear"),
        f"Cannot clear the feature cache {cache}: {cache / 'efficientnet_lite0'} "
        "(read-only) cannot be written",
    )
    assert snapshot(cache) == before


def test_cache_clear_says_what_it_could_not_remove(filled, tmp_path, monkeypatch):
    cache = copy_of(filled[0], tmp_path, monkeypatch)
    files = sorted(f for d in cache.iterdir() for f in d.iterdir())
    stuck = files[1]
    unlink = Path.unlink

    def refusing(self, missing_ok=False):
        if self == stuck:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", refusing)
    refused(
        invoke("cache", "clear"),
        f"Cannot remove {stuck} from the feature cache (Operation not permitted); 1 of its "
        f"{len(files)} files were removed before it, the others are in place. Fix what "
        "keeps it, then run `cl-bench cache clear` again.",
    )
    assert sorted(f for d in cache.iterdir() for f in d.iterdir()) == files[1:]


def test_the_write_probe_is_what_the_cache_asks(tmp_path, read_only):
    """The store and `cache clear` decide by the probe the fixture refuses."""
    entry = tmp_path / "cache" / "backbone" / "entry.npy"
    entry.parent.parent.mkdir()
    assert feature_cache.entry_write_problem(entry) is None  # its folder made when written
    read_only(tmp_path / "cache")
    assert feature_cache.entry_write_problem(entry) == "read-only"
