"""The data path that feeds a GPU: loader workers from the CPUs the process may use
(affinity, Slurm), the same loader settings for Avalanche's loaders and a method's
own, EWC's importance pass through them, and test images on disk decoded once per run
into the very floats the file transform gives (an on-disk run end to end:
tests/integration/test_data_path.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from avalanche.benchmarks.utils.classification_dataset import (
    _make_taskaware_tensor_classification_dataset as tensor_dataset,
)
from avalanche.training.plugins import EWCPlugin
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cl_bench.contract import loading
from cl_bench.contract.loading import Loading, configure_loading, method_loader
from cl_bench.scenarios import transforms
from cl_bench.scenarios.decoded_tests import (
    DecodedEval,
    decode_files,
    decoded_bytes,
    decoded_tests,
)
from cl_bench.scenarios.image_data import FileList
from cl_bench.scenarios.transforms import FileTransform, eval_transform
from cl_bench.strategies.ewc import TrainableEWCPlugin
from tests.helpers.paths import REPO


def cpus(monkeypatch, affinity: int, slurm: str | None) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    if slurm is None:
        monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    else:
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", slurm)


@pytest.mark.parametrize(
    ("affinity", "slurm", "usable", "workers"),
    [
        (16, None, 16, 15),  # a whole node of one's own
        (16, "4", 4, 3),  # Slurm's count where it is smaller than the mask
        (3, "8", 3, 2),  # the mask where it is smaller (taskset inside the job)
        (2, None, 2, 1),
        (1, None, 1, 1),  # one core: one worker still overlaps decoding with the GPU
        (6, "0", 6, 5),  # not a count: ignored
        (6, "four", 6, 5),
        (6, "", 6, 5),
    ],
)
def test_workers_follow_affinity_and_slurm(monkeypatch, affinity, slurm, usable, workers):
    cpus(monkeypatch, affinity, slurm)
    assert loading.usable_cpus() == usable
    assert loading.loader_workers() == workers


def test_loader_settings_per_device_and_data(monkeypatch):
    cpus(monkeypatch, 8, None)
    assert Loading.for_run("cpu", on_disk=False).dataloader_kwargs() == {
        "num_workers": 0,
        "pin_memory": False,
    }
    assert Loading.for_run("cpu", on_disk=True).dataloader_kwargs() == {
        "num_workers": 1,
        "pin_memory": False,
        "prefetch_factor": 2,
    }
    assert Loading.for_run("cuda", on_disk=False).dataloader_kwargs() == {
        "num_workers": 0,
        "pin_memory": True,
    }
    gpu_disk = Loading.for_run(torch.device("cuda", 0), on_disk=True)
    assert gpu_disk.dataloader_kwargs() == {
        "num_workers": 7,
        "pin_memory": True,
        "prefetch_factor": 2,
    }
    # Avalanche 0.6's loader factories drop what they do not name: no prefetch_factor
    assert gpu_disk.strategy_kwargs() == {"num_workers": 7, "pin_memory": True}
    # data in memory: no worker, pinned as the run is
    assert gpu_disk.in_memory().strategy_kwargs() == {"num_workers": 0, "pin_memory": True}
    # an evaluation of test images in memory: the GPU keeps its workers, the CPU has none
    assert gpu_disk.evaluation_in_memory() == gpu_disk
    assert Loading.for_run("cpu", on_disk=True).evaluation_in_memory() == Loading(
        workers=0, pin_memory=False
    )
    assert Loading.for_run("cpu", on_disk=False).strategy_kwargs() == {
        "num_workers": 0,
        "pin_memory": False,
    }


def test_method_loader_reads_the_run_settings(monkeypatch):
    # the process's settings as before any run, restored after: a run earlier in the
    # same process (an integration test's) leaves its own
    monkeypatch.setattr(loading, "_current", Loading())
    cpus(monkeypatch, 4, None)
    data = TensorDataset(torch.arange(10.0))
    assert method_loader(data, 4).num_workers == 0  # nothing configured: as a plain loader
    configure_loading(torch.device("cuda"), on_disk=True)
    loader = method_loader(data, 4)
    assert (
        loader.num_workers,
        loader.persistent_workers,
        loader.prefetch_factor,
        loader.pin_memory,
    ) == (3, False, 2, True)
    features = method_loader(data, 4, in_memory=True)
    assert (features.num_workers, features.pin_memory) == (0, True)
    configure_loading("cpu", on_disk=False)
    assert loading.current_loading() == Loading(workers=0, pin_memory=False)


def test_method_loader_draws_from_the_global_generator_as_a_plain_loader_did():
    """Same batches and the same global generator state after the pass: a method's
    numbers on data in memory do not move."""
    data = TensorDataset(torch.arange(20.0))

    def pass_over(make) -> tuple[list, torch.Tensor]:
        torch.manual_seed(7)
        batches = [b[0].tolist() for b in make()]
        return batches, torch.rand(3)

    plain = pass_over(lambda: DataLoader(data, batch_size=6, shuffle=True))
    ours = pass_over(lambda: method_loader(data, 6, shuffle=True))
    assert ours[0] == plain[0] and torch.equal(ours[1], plain[1])


# files that build a DataLoader themselves, and why they may
OWN_LOADERS = {
    "cl_bench/contract/loading.py": "method_loader itself",
    "cl_bench/engine/features.py": "the feature store: its own generator, workers from the "
    "engine, a deterministic transform",
    "cl_bench/scenarios/decoded_tests.py": "the decode-once pass: its own generator",
    "cl_bench/strategies/blocks/gathered_batches.py": "Avalanche's training loader over "
    "features in memory: its sampler, "
    "generator and pinning, no workers",
}


def test_every_in_method_loader_goes_through_the_helper():
    found = {
        str(p.relative_to(REPO))
        for p in sorted((REPO / "cl_bench").rglob("*.py"))
        if re.search(r"\bDataLoader\(", p.read_text(encoding="utf-8"))
    }
    assert found == set(OWN_LOADERS)
    users = {
        str(p.relative_to(REPO))
        for p in sorted((REPO / "cl_bench").rglob("*.py"))
        if "method_loader(" in p.read_text(encoding="utf-8")
    }
    assert {
        "cl_bench/strategies/mos.py",
        "cl_bench/strategies/tuna.py",
        "cl_bench/strategies/min.py",
        "cl_bench/strategies/ewc.py",
        "cl_bench/contract/statistics.py",
        "cl_bench/strategies/blocks/first_session.py",
    } <= users


# ---------------------------------------------------------------- EWC's importances


@pytest.fixture
def ewc_setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    model[0].bias.requires_grad_(False)  # frozen: no importance kept
    x, y = torch.randn(10, 5), torch.randint(0, 3, (10,))
    return model, tensor_dataset(x, y, task_labels=0, targets=y)


def importances(plugin, model, dataset) -> dict[str, torch.Tensor]:
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    got = plugin.compute_importances(model, nn.CrossEntropyLoss(), optimizer, dataset, "cpu", 4)
    return {name: d.data for name, d in got.items()}


def test_ewc_importances_are_avalanches_bit_for_bit_in_fp32(ewc_setup):
    model, dataset = ewc_setup
    ours = importances(TrainableEWCPlugin(1.0, "online", 1.0, None), model, dataset)
    theirs = importances(EWCPlugin(1.0, mode="online", decay_factor=1.0), model, dataset)
    assert list(ours) == ["0.weight", "2.weight", "2.bias"]
    for name, value in ours.items():
        assert torch.equal(value, theirs[name]), name
    assert float(theirs["0.bias"].abs().max()) == 0.0  # Avalanche keeps the frozen one too
    # through a worker process (the run's settings for images on disk): the same bits
    configure_loading("cpu", on_disk=True)
    again = importances(TrainableEWCPlugin(1.0, "online", 1.0, None), model, dataset)
    assert all(torch.equal(again[n], ours[n]) for n in ours)
    bound = float(ours["0.weight"].median())
    clamped = importances(TrainableEWCPlugin(1.0, "online", 1.0, bound), model, dataset)
    assert torch.equal(clamped["0.weight"], ours["0.weight"].clamp(max=bound))


def test_ewc_importance_pass_runs_under_the_strategy_precision(ewc_setup):
    model, dataset = ewc_setup
    seen = []
    model.register_forward_hook(
        lambda m, i, out: seen.append((torch.is_autocast_enabled("cpu"), out.dtype))
    )
    fp32 = importances(TrainableEWCPlugin(1.0, "online", 1.0, None), model, dataset)
    assert seen == [(False, torch.float32)] * 3  # batches of 4, 4, 2
    seen.clear()
    bf16 = importances(
        TrainableEWCPlugin(1.0, "online", 1.0, None, precision="bf16"), model, dataset
    )
    assert seen == [(True, torch.bfloat16)] * 3
    for name in fp32:
        assert bf16[name].dtype == torch.float32
        assert not torch.equal(bf16[name], fp32[name])
        torch.testing.assert_close(bf16[name], fp32[name], rtol=0.1, atol=1e-4)


# ------------------------------------------------------- test images decoded once


def photo_jpegs(folder: Path, sizes: list[tuple[int, int]]) -> list[str]:
    """JPEGs with smooth colour, sharp edges and grain, at the given (width, height)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    paths = []
    for i, (w, h) in enumerate(sizes):
        smooth = Image.fromarray(rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)).resize(
            (w, h), Image.BICUBIC
        )
        pixels = np.asarray(smooth, np.int16).copy()
        pixels[h // 3 :, : w // 2] = rng.integers(0, 256, 3)  # an edge
        pixels += rng.normal(0, 6, pixels.shape).astype(np.int16)
        path = folder / f"{i}.jpg"
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=90)
        paths.append(str(path))
    return paths


SIZES = [(500, 375), (375, 500), (40, 30), (33, 33), (64, 48), (301, 199)]


@pytest.mark.parametrize("size", [32, 224])
def test_decoded_test_images_give_the_file_transforms_bits(tmp_path, size):
    files = FileList(photo_jpegs(tmp_path / "jpegs", SIZES))
    reference = torch.stack([FileTransform(size, train=False)(p) for p in files.paths])
    for workers in (0, 2):
        decoded = decode_files(files, size, workers=workers, progress=False)
        assert decoded.dtype == torch.uint8 and decoded.shape == (len(SIZES), 3, size, size)
        assert decoded.nbytes == decoded_bytes(len(SIZES), size)
        tf = DecodedEval(size)
        assert torch.equal(torch.stack([tf(x) for x in decoded]), reference)
        assert torch.equal(tf(decoded), reference)  # as a batch too
    # a path (a training image in a method's own pass) still goes through the file transform
    assert torch.equal(DecodedEval(size)(files.paths[0]), reference[0])
    assert DecodedEval(size).id == eval_transform(True, size).id  # same id, same hash


def test_decoded_once_per_file_list_and_size(tmp_path):
    files = FileList(photo_jpegs(tmp_path / "jpegs", SIZES[:2]))
    first = decoded_tests(files, 32, progress=False)
    assert decoded_tests(files, 32, progress=False) is first
    assert decoded_tests(files, 48, progress=False).shape == (2, 3, 48, 48)
    assert decoded_bytes(6000, 224) == 903_168_000  # ImageNet-R's test set at 224 px


class _Seeded(torch.utils.data.Dataset):
    """Files as the stream hands them to the training transform: indexed paths."""

    def __init__(self, paths: list[str], size: int) -> None:
        self.paths, self.transform = paths, FileTransform(size, train=True)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(transforms.IndexedPath(self.paths[i], i))


def crops(paths: list[str], workers: int, seed: int, passes: int = 1) -> list[torch.Tensor]:
    loader = DataLoader(
        _Seeded(paths, 16),
        batch_size=2,
        num_workers=workers,
        generator=torch.Generator().manual_seed(seed),
    )
    return [torch.cat(list(loader)) for _ in range(passes)]


def test_training_crops_do_not_depend_on_the_worker_count(tmp_path):
    """Image i's random crop is seeded by the pass's base seed and i: one worker and
    two give the same crops; the next pass (a fresh base seed) crops anew."""
    paths = photo_jpegs(tmp_path / "jpegs", [(40, 30)] * 6)
    one, again = crops(paths, 1, seed=7, passes=2)
    two = crops(paths, 2, seed=7)[0]
    assert torch.equal(one, two)
    assert not torch.equal(one, again)  # every epoch draws new crops
    assert not torch.equal(one, crops(paths, 1, seed=8)[0])
    assert transforms.sample_seed("plain/path.jpg") is None  # main process: global RNG
