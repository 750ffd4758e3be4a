"""Shared fixtures and helpers: one small end-to-end run reused by several tests, the
check of a refusal, card variants, image trees, runs killed and resumed in a fresh
process, strategies on a random-weight ViT and a small stream driven task by task."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import yaml
from PIL import Image
from typer.testing import CliRunner

from cl_bench.backbones.base import Backbone
from cl_bench.cards.config import load_method
from cl_bench.cards.strategy import import_object
from cl_bench.commands.cli import app
from cl_bench.contract import drive
from cl_bench.engine import checkpoint
from cl_bench.engine.checkpoint import KILL_ENV, rng_state, set_rng_state
from cl_bench.engine.environment import seed_everything
from cl_bench.engine.recording import Recorder
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.scenarios.loaders import synthetic
from cl_bench.scenarios.order import task_split
from cl_bench.scenarios.stream import Stream, build_stream
from cl_bench.scenarios.transforms import ToModelInput

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")

FAST = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32", "--set",
        "tosca.epochs=3"]


def invoke(*args: str):
    """Run the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(app, list(args))


@pytest.fixture(autouse=True, scope="session")
def private_feature_cache(tmp_path_factory):
    """Tests never read or write the user's feature cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CL_BENCH_CACHE", str(tmp_path_factory.mktemp("feature_cache")))
    yield
    mp.undo()


def e2e_cache(tmp_path_factory) -> Path:
    """The feature cache of :func:`e2e_run`, for tests that read what it extracted."""
    path = tmp_path_factory.getbasetemp() / "e2e_cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def e2e_run(tmp_path_factory, private_feature_cache) -> tuple[Path, object, dict]:
    """TOSCA + SimpleCIL on `synthetic` with the offline EfficientNet-Lite0."""
    out = tmp_path_factory.mktemp("e2e")
    with pytest.MonkeyPatch.context() as mp:  # its own cache: it checks that it extracts
        mp.setenv("CL_BENCH_CACHE", str(e2e_cache(tmp_path_factory)))
        result = invoke("run", "--out", str(out), *FAST)
    records = {json.loads(p.read_text())["method"]: json.loads(p.read_text())
               for p in sorted(out.glob("runs/*/*/*.json"))}
    return out, result, records


# -------------------------------------------- refusals and card variants


# the advice of a strategy that declares no method contract
ADVICE = ("declares no method contract: what it consumes, whether it trains the backbone and "
          "how it is driven. Either the class derives from cl_bench.contract.Method and "
          "declares it, e.g. spec = MethodSpec(inputs=Inputs.IMAGES, trains_backbone=False, "
          "schedule=Schedule.PER_TASK) (see cl_bench/contract/), or, for a plain Avalanche "
          "strategy, its method card declares it in a `contract:` block with inputs, "
          "trains_backbone, schedule and the model factory to build it with (see "
          "cl_bench/contract/plain.py).")


def refused(result, needle: str, out: Path | None = None) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert needle in result.stderr, result.stderr
    if out is not None:
        assert not out.exists() or list(out.rglob("*")) == []


def card_variant(tmp_path: Path, folder: Path, base: str, name: str, **keys) -> Path:
    """A folder for --cards holding built-in card ``base`` as ``name`` with ``keys``
    replaced (a card made broken on purpose, or cheaper); returns the folder, which
    further calls on the same ``tmp_path`` add to."""
    raw = yaml.safe_load((folder / f"{base}.yaml").read_text())
    cards = tmp_path / "cards"
    cards.mkdir(exist_ok=True)
    (cards / f"{name}.yaml").write_text(yaml.safe_dump({**raw, "name": name, **keys}))
    return cards


def image_tree(root: Path, per_class: int = 2) -> Path:
    """A 2-class ImageFolder tree of 8x8 PNGs in PILOT's layout."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / c / f"{i}.png")
    return root


TREE = ["--scenario", "imagefolder", "--methods", "simplecil", "--image-size", "32",
        "--no-progress", "--set", "scenario.init_cls=1", "--set", "scenario.increment=1"]


# --------------------------- runs in a fresh process, killed and resumed


VIT_STREAM = ["--scenario", "synthetic", "--backbone", "vit_tiny_patch16_224", "--weights",
              "random", "--image-size", "32", "--precision", "fp32", "--no-progress",
              "--set", "scenario.init_cls=4", "--set", "scenario.increment=3",  # 3 tasks: 4+3+3
              "--set", "scenario.dataset_args={train_per_class: 6, test_per_class: 3}"]


NUMBERS = ("acc_matrix", "acc_seen", "avg_acc", "last_acc", "avg_acc_task_mean", "forgetting",
           "bwt", "routing_acc", "accounting", "class_order", "config")


def cl_bench(out: Path, *args: str, kill_after: int | None = None
             ) -> subprocess.CompletedProcess:
    """``cl-bench run --out out ...`` in a fresh process (the feature cache is the
    session's private one, through the environment)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    env.pop(KILL_ENV, None)
    if kill_after is not None:
        env[KILL_ENV] = str(kill_after)
    return subprocess.run([sys.executable, "-m", "cl_bench", "run", "--out", str(out), *args],
                          env=env, capture_output=True, text=True, timeout=1200)


def records(out: Path) -> dict[str, dict]:
    found = [json.loads(p.read_text()) for p in sorted(out.glob("runs/*/*/*.json"))]
    return {r["method"]: r for r in found}


def ckpts(out: Path) -> list[Path]:
    return sorted(out.glob("runs/*/*/*.ckpt"))


def resumed_line(method: str, task: int, tasks: int) -> str:
    return f"resuming {method} seed 1993 at task {task}/{tasks} from "


def kill_and_resume(out: Path, args: list[str], methods: list[str], kill_after: int,
                    tasks: int) -> dict[str, dict]:
    """Kill each method once after task ``kill_after`` (0-based) and resume it (see the
    module docstring); returns the final records."""
    command = [*args, "--methods", ",".join(methods)]
    for k, method in enumerate(methods):
        run = cl_bench(out, *command, kill_after=kill_after)
        assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
        assert sorted(records(out)) == methods[:k]
        [saved] = ckpts(out)
        assert saved.parent.name == method
        assert checkpoint.read(saved)["done"] == kill_after + 1
        if k:
            assert resumed_line(methods[k - 1], kill_after + 2, tasks) in run.stdout
    final = cl_bench(out, *command)
    assert final.returncode == 0, final.stdout + final.stderr
    assert resumed_line(methods[-1], kill_after + 2, tasks) in final.stdout
    assert ckpts(out) == [] and sorted(records(out)) == sorted(methods)
    return records(out)


def assert_same_numbers(resumed: dict, reference: dict) -> None:
    for key in NUMBERS:
        assert resumed[key] == reference[key], key
    assert len(resumed["timing"]["train_s"]) == len(reference["timing"]["train_s"])


# ------------------------------------- strategies on a random-weight ViT


def vit_backbone(name: str, dim: int, size: int = 32) -> Backbone:
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=0, img_size=size)
    return Backbone(name=name, model=model, dim=dim, input_size=size, kind="vit",
                    weights="random", weights_digest="random")


def strategy(method: str, backbone: Backbone, n_classes: int, plugins=(), **overrides):
    card = load_method(method)
    params = card.params | overrides
    return import_object(card.raw["strategy"])(
        params=params, backbone=backbone, n_classes=n_classes, device=CPU,
        plugins=list(plugins), evaluator=quiet_evaluator())


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: with two threads on two busy cores, synchronisation costs more
    than the arithmetic."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------ a small stream driven task by task


def small_stream() -> Stream:
    """4 synthetic classes (8 training, 4 test images each, 32 px) in 3 tasks."""
    data = synthetic(n_classes=4, train_per_class=8, test_per_class=4, size=32)
    tf = ToModelInput(32)
    return build_stream(data.train_x, data.train_y, data.test_x, data.test_y, [2, 0, 3, 1],
                        task_split(4, 2, 1), test_shuffle=True, seed=1993,
                        train_transform=tf, eval_transform=tf)


def run_stream(method: str, backbone, start=None, **overrides):
    """Train ``method`` (1 epoch, batch 8) over :func:`small_stream`, from scratch or from
    ``start`` = (task, saved checkpoint); returns the strategy, its recorder and the
    serialised checkpoint after every task."""
    stream = small_stream()
    seed_everything(1993)
    recorder = Recorder(stream.task_of_label, progress=False)
    s = strategy(method, backbone, 4, [recorder], epochs=1, batch_size=8, **overrides)
    if start is not None:
        s.restore_state(start[1]["strategy"])
        set_rng_state(start[1]["rng"])
    saved = {}

    def after(i: int) -> None:  # serialised with the RNG states, as a run's checkpoint is
        buf = io.BytesIO()
        torch.save({"strategy": s.checkpoint_state(), "rng": rng_state()}, buf)
        saved[i] = buf.getvalue()
    drive(s, stream, start=0 if start is None else start[0], after_task=after)
    return s, recorder, saved


# --------------------------------------------------- image trees on disk


def make_tree(root: Path, classes: list[str], n_train: int = 3, n_test: int = 2) -> Path:
    rng = np.random.RandomState(0)
    for split, n in (("train", n_train), ("test", n_test)):
        for k, c in enumerate(classes):
            (root / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                img = (rng.rand(20, 24, 3) * 50 + 40 * k).astype(np.uint8)
                Image.fromarray(img).save(root / split / c / f"img{i}.jpg")
    return root
