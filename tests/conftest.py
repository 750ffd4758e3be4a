"""Shared fixtures and helpers: one small end-to-end run reused by several tests, the
check of a refusal, card variants, image trees, runs killed and resumed in a fresh
process, strategies on a random-weight ViT and a small stream driven task by task
(and the smallest per-task strategy over it);
`probe`, a test-only method for grids in worker processes and on the SLURM cluster."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import yaml
from PIL import Image
from torch import nn
from typer.testing import CliRunner

from cl_bench.backbones.base import Backbone, seeded_init
from cl_bench.backbones.compiled import SWITCH
from cl_bench.cards import config
from cl_bench.cards.config import load_method
from cl_bench.cards.strategy import import_object
from cl_bench.commands.cli import app
from cl_bench.contract import Inputs, MethodSpec, Schedule, drive
from cl_bench.engine import checkpoint
from cl_bench.engine.checkpoint import KILL_ENV, rng_state, set_rng_state
from cl_bench.engine.environment import seed_everything
from cl_bench.engine.recording import Recorder
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.scenarios.image_data import ImageData
from cl_bench.scenarios.loaders import synthetic
from cl_bench.scenarios.order import task_split
from cl_bench.scenarios.stream import Stream, build_stream
from cl_bench.scenarios.transforms import ToModelInput
from cl_bench.strategies.blocks.per_task import AutocastForward, PerTaskTemplate

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")

FAST = [
    "--scenario",
    "synthetic",
    "--no-progress",
    "--precision",
    "fp32",
    "--set",
    "tosca.epochs=3",
]


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


@pytest.fixture(autouse=True, scope="session")
def eager_frozen_features():
    """Frozen CNN features in torch eager unless $CL_BENCH_FROZEN_RUNTIME says otherwise:
    the tests' exact accuracies were measured so, and torch's fp32 CPU kernels give them
    on AVX2 and AVX512 alike, while OpenVINO picks its kernels per instruction set and its
    last digits were measured on one kind of CPU only. The compiled runtime has tests of
    its own (test_compiled_features.py), which set the switch."""
    mp = pytest.MonkeyPatch()
    mp.setenv(SWITCH, os.environ.get(SWITCH) or "torch")
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
    records = {
        json.loads(p.read_text())["method"]: json.loads(p.read_text())
        for p in sorted(out.glob("runs/*/*/*.json"))
    }
    return out, result, records


def balanced_subset(data: ImageData, n_train: int, n_test: int) -> ImageData:
    """The first images of each class in turn (every class present), so a run sees
    n_train / n_test images: feature chunks of 32 on CPU leave 1 to 3 at the end."""

    def take(x, y, n):
        rank = torch.zeros_like(y)
        for c in y.unique():
            rank[y == c] = torch.arange(int((y == c).sum()))
        idx = torch.argsort(rank * data.n_classes + y)[:n]
        return x[idx], y[idx]

    train_x, train_y = take(data.train_x, data.train_y, n_train)
    test_x, test_y = take(data.test_x, data.test_y, n_test)
    return ImageData(data.name, train_x, train_y, test_x, test_y, data.class_names)


# -------------------------------------------- refusals and card variants


# the advice of a strategy that declares no method contract
ADVICE = (
    "declares no method contract: what it consumes, whether it trains the backbone and "
    "how it is driven. Either the class derives from cl_bench.contract.Method and "
    "declares it, e.g. spec = MethodSpec(inputs=Inputs.IMAGES, trains_backbone=False, "
    "schedule=Schedule.PER_TASK) (see cl_bench/contract/), or, for a plain Avalanche "
    "strategy, its method card declares it in a `contract:` block with inputs, "
    "trains_backbone, schedule and the model factory to build it with (see "
    "cl_bench/contract/plain.py)."
)


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


def one_image_classes(root: Path, n_classes: int) -> Path:
    """An ImageFolder tree of ``n_classes`` classes of one 8x8 PNG each in train and test
    (what a dry run of a scenario whose card states its class count reads)."""
    pixels = Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8))
    for split in ("train", "test"):
        for c in range(n_classes):
            (root / split / f"c{c:03d}").mkdir(parents=True, exist_ok=True)
            pixels.save(root / split / f"c{c:03d}" / "0.png")
    return root


TREE = [
    "--scenario",
    "imagefolder",
    "--methods",
    "simplecil",
    "--image-size",
    "32",
    "--no-progress",
    "--set",
    "scenario.init_cls=1",
    "--set",
    "scenario.increment=1",
]


# --------------------------- runs in a fresh process, killed and resumed


VIT_STREAM = [
    "--scenario",
    "synthetic",
    "--backbone",
    "vit_tiny_patch16_224",
    "--weights",
    "random",
    "--image-size",
    "32",
    "--precision",
    "fp32",
    "--no-progress",
    "--set",
    "scenario.init_cls=4",
    "--set",
    "scenario.increment=3",  # 3 tasks: 4+3+3
    "--set",
    "scenario.dataset_args={train_per_class: 6, test_per_class: 3}",
]


NUMBERS = (
    "acc_matrix",
    "acc_seen",
    "avg_acc",
    "last_acc",
    "avg_acc_task_mean",
    "forgetting",
    "bwt",
    "routing_acc",
    "accounting",
    "class_order",
    "config",
)


def cl_bench(out: Path, *args: str, kill_after: int | None = None) -> subprocess.CompletedProcess:
    """``cl-bench run --out out ...`` in a fresh process (the feature cache is the
    session's private one, through the environment)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    env.pop(KILL_ENV, None)
    if kill_after is not None:
        env[KILL_ENV] = str(kill_after)
    return subprocess.run(
        [sys.executable, "-m", "cl_bench", "run", "--out", str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


def records(out: Path) -> dict[str, dict]:
    found = [json.loads(p.read_text()) for p in sorted(out.glob("runs/*/*/*.json"))]
    return {r["method"]: r for r in found}


def ckpts(out: Path) -> list[Path]:
    return sorted(out.glob("runs/*/*/*.ckpt"))


def resumed_line(method: str, task: int, tasks: int) -> str:
    return f"resuming {method} seed 1993 at task {task}/{tasks} from "


def kill_and_resume(
    out: Path, args: list[str], methods: list[str], kill_after: int, tasks: int
) -> dict[str, dict]:
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
    return Backbone(
        name=name,
        model=model,
        dim=dim,
        input_size=size,
        kind="vit",
        weights="random",
        weights_digest="random",
    )


def strategy(method: str, backbone: Backbone, n_classes: int, plugins=(), **overrides):
    card = load_method(method)
    params = card.params | overrides
    return import_object(card.raw["strategy"])(
        params=params,
        backbone=backbone,
        n_classes=n_classes,
        device=CPU,
        plugins=list(plugins),
        evaluator=quiet_evaluator(),
    )


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
    return build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        [2, 0, 3, 1],
        task_split(4, 2, 1),
        test_shuffle=True,
        seed=1993,
        train_transform=tf,
        eval_transform=tf,
    )


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


class TinyPerTask(AutocastForward, PerTaskTemplate):
    """The smallest strategy on the shared training path (autocast forward, loss scaling
    in fp16, the per-task optimizer): a linear layer over the 3 x 32 x 32 pixels of
    :func:`small_stream`'s 4 classes, built under a fixed seed; ``settings`` override
    batch 4, 2 epochs, SGD at lr 0.01 with momentum 0.9."""

    spec = MethodSpec(inputs=Inputs.IMAGES, trains_backbone=False, schedule=Schedule.PER_TASK)

    def __init__(self, *, precision: str, plugins=(), settings: dict | None = None) -> None:
        self.precision = precision
        with seeded_init():
            model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4))
        params = {
            "batch_size": 4,
            "eval_batch_size": 8,
            "epochs": 2,
            "optimizer": "sgd",
            "lr": 0.01,
            "momentum": 0.9,
        } | (settings or {})
        super().__init__(
            params=params,
            model=model,
            device=CPU,
            plugins=list(plugins),
            evaluator=quiet_evaluator(),
        )


def run_tiny(precision: str, plugins=(), **settings) -> TinyPerTask:
    """:class:`TinyPerTask` driven over :func:`small_stream` under a fixed seed."""
    stream = small_stream()
    seed_everything(1993)
    s = TinyPerTask(precision=precision, plugins=plugins, settings=settings)
    drive(s, stream)
    return s


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


PROBE_MODULE = '''
import os
import time
from pathlib import Path

import torch

from cl_bench.strategies.simplecil import SimpleCIL


class Probe(SimpleCIL):
    """SimpleCIL that logs its seed, then fails (PROBE_FAIL; PROBE_OOM: out of memory, as
    CUDA raises it) or waits for PROBE_GO
    (PROBE_HOLD: seeds or "all"); with PROBE_HOLD_TASK=k (or k@seed,seed) it also
    waits for PROBE_GO before training task k (tasks count from 0), after the earlier
    tasks' checkpoints, and notes the wait in PROBE_LOG.hold."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        seed = self.probe_seed = str(torch.initial_seed())  # run_one seeds torch with it
        with open(os.environ["PROBE_LOG"], "a") as f:
            f.write(f"{seed} {os.getpid()}\\n")
        if seed in os.environ.get("PROBE_FAIL", "").split(","):
            raise RuntimeError(f"probe failure for seed {seed}")
        if seed in os.environ.get("PROBE_OOM", "").split(","):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        hold = os.environ.get("PROBE_HOLD", "").split(",")
        if "all" in hold or seed in hold:
            while not Path(os.environ["PROBE_GO"]).exists():
                time.sleep(0.05)

    def train(self, experiences, *args, **kwargs):
        task, _, seeds = os.environ.get("PROBE_HOLD_TASK", "").partition("@")
        go = Path(os.environ["PROBE_GO"])
        mine = not seeds or self.probe_seed in seeds.split(",")
        if task and mine and experiences.current_experience == int(task) and not go.exists():
            with open(os.environ["PROBE_LOG"] + ".hold", "a") as f:
                f.write(f"{self.probe_seed} {os.getpid()}\\n")
            while not go.exists():
                time.sleep(0.05)
        return super().train(experiences, *args, **kwargs)
'''

PROBE_CARD = """name: probe
title: Probe
strategy: cl_probe:Probe
inputs: features
backbones: any
defaults:
  batch_size: 128
  eval_batch_size: 128
"""

DRIVER = """import sys
from pathlib import Path

import cl_bench.cards.config

if __name__ == "__main__":
    cl_bench.cards.config.METHODS_DIR = Path(sys.argv[1])
    from cl_bench.commands.cli import app
    app(sys.argv[2:], prog_name="cl-bench")
"""

GRID = ["--scenario", "synthetic", "--methods", "probe", "--no-progress"]


@pytest.fixture
def probe(tmp_path, monkeypatch) -> Path:
    """The `probe` method, known to this process and importable by every worker."""
    home = tmp_path / "probe"
    (home / "methods").mkdir(parents=True)
    (home / "cl_probe.py").write_text(PROBE_MODULE)
    (home / "methods" / "probe.yaml").write_text(PROBE_CARD)
    (home / "driver.py").write_text(DRIVER)
    monkeypatch.setattr(config, "METHODS_DIR", home / "methods")
    monkeypatch.syspath_prepend(str(home))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(home), os.environ.get("PYTHONPATH")) if p)
    )
    monkeypatch.setenv("PROBE_LOG", str(home / "probe.log"))
    monkeypatch.setenv("PROBE_GO", str(home / "go"))
    for name in ("PROBE_FAIL", "PROBE_OOM", "PROBE_HOLD", "PROBE_HOLD_TASK"):
        monkeypatch.delenv(name, raising=False)
    return home


def starts(home: Path) -> Counter:
    """How many times each seed's run started (one log line per start)."""
    log = home / "probe.log"
    return (
        Counter(line.split()[0] for line in log.read_text().splitlines())
        if (log.exists())
        else Counter()
    )


def _interruptible() -> None:
    """In the child, before Python starts: Ctrl-C's default disposition, as a terminal
    gives it. A test run started in the background (``cmd &`` in a script) inherits
    SIGINT ignored, and Python then installs no KeyboardInterrupt handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def start_grid(probe):
    """Start `cl-bench run` as its own process group (so the whole grid can be killed),
    output to ``log``; whatever is still running at the end of the test is killed."""
    started: list[tuple[subprocess.Popen, object]] = []

    def start(out: Path, *args: str, log: Path, **env: str) -> subprocess.Popen:
        cmd = [
            sys.executable,
            str(probe / "driver.py"),
            str(probe / "methods"),
            "run",
            "--out",
            str(out),
            *GRID,
            *args,
        ]
        sink = log.open("w")
        proc = subprocess.Popen(
            cmd,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
            preexec_fn=_interruptible,
        )
        started.append((proc, sink))
        return proc

    yield start
    for proc, sink in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        sink.close()


def status_of(out: Path) -> str:
    result = invoke("status", "--out", str(out))
    assert result.exit_code == 0, result.output
    return result.stdout


SLURM_LOCAL = Path(__file__).resolve().parents[1] / "scripts" / "slurm-local.sh"


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A one-node SLURM cluster (scripts/slurm-local.sh), started once for the
    `slurm`-marked tests and stopped after them; skipped unless asked for."""
    if os.environ.get("CL_BENCH_SLURM_TESTS") != "1":
        pytest.skip(
            "the slurm tests start a one-node SLURM cluster: run them with "
            "CL_BENCH_SLURM_TESTS=1 as root on Debian (.ci/run does)"
        )
    if os.geteuid() != 0:
        pytest.skip("scripts/slurm-local.sh needs root to install and run the daemons")
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "CL_BENCH_SLURM_DIR": str(state)}
    started = subprocess.run([str(SLURM_LOCAL), "start"], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        subprocess.run([str(SLURM_LOCAL), "stop"], env=env)
        pytest.fail(f"scripts/slurm-local.sh start failed:\n{started.stderr[-3000:]}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(state / "slurm.conf"))
        mp.setenv("CL_BENCH_SLURM_POLL_S", "1")
        yield state
    stopped = subprocess.run([str(SLURM_LOCAL), "stop"], env=env, capture_output=True, text=True)
    assert stopped.returncode == 0, stopped.stderr
