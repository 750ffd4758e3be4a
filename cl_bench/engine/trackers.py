"""Experiment trackers (``cl-bench run --log``): a run's per-task metrics, its final
numbers and its configuration sent to TensorBoard, Weights & Biases, MLflow or a CSV file,
beside the result file that stays the record. A tracker that fails is reported and left
out: it never costs a run its result.

After every task: ``acc_seen`` (accuracy on every class seen so far), ``avg_acc`` (the
mean of ``acc_seen`` up to this task) and ``acc_task_<j>`` (accuracy on task j's classes),
with the task's number (1-based) as the step. When the run ends: ``final/avg_acc``,
``final/last_acc``, ``final/forgetting``, ``final/bwt``, the parameter counts and the
seconds of training, at the last task's step; and the record's configuration, flattened
to ``method.lr``-style keys. TensorBoard goes through Avalanche's logger
(``log_single_metric``); W&B and MLflow through their own clients (Avalanche's W&B logger
no longer fits wandb's API, and it has no MLflow logger); CSV is cl-bench's own long table
(task, name, value).

Where: ``<out>/logs/<scenario>/<method>/<seed>-<config>/`` (the result file's name),
one folder per tracker; MLflow's file store is ``<that folder>/mlflow`` unless
``MLFLOW_TRACKING_URI`` names another; W&B runs offline unless ``WANDB_MODE`` says
otherwise (``wandb sync`` uploads an offline run later). Trackers only read what the run
computed: they change no number and no result identity.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from cl_bench.errors import UserError, unknown

TRACKERS = ("csv", "tensorboard", "wandb", "mlflow")
# the module each tracker needs, and the package that provides it
NEEDS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}
NEEDS["mlflow"] = ("mlflow", "mlflow-skinny")


class Backend(Protocol):
    def metrics(self, values: dict[str, float], step: int) -> None: ...

    def config(self, flat: dict[str, str]) -> None: ...

    def close(self) -> None: ...


def check_trackers(names: Sequence[str]) -> list[str]:
    """The tracker names, each known and importable here; a UserError names the fix."""
    for name in names:
        if name not in TRACKERS:
            raise unknown("--log tracker", name, list(TRACKERS))
        module, package = NEEDS.get(name, (None, None))
        if module and importlib.util.find_spec(module) is None:
            raise UserError(
                f"--log {name} needs the {package} package, which is not installed here; "
                f"install it (pip install {package}) or leave {name} out of --log."
            )
    return list(dict.fromkeys(names))


def log_folder(result: Path) -> Path:
    """``<out>/logs/<scenario>/<method>/<seed>-<config>`` for the result file
    ``<out>/runs/<scenario>/<method>/<seed>-<config>.json``."""
    return result.parents[3] / "logs" / result.parent.parent.name / result.parent.name / result.stem


def flatten(block: Any, prefix: str = "") -> dict[str, str]:
    """``{"method": {"lr": 0.1}}`` -> ``{"method.lr": "0.1"}``; lists as JSON."""
    if isinstance(block, dict):
        flat: dict[str, str] = {}
        for key, value in block.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    text = block if isinstance(block, str) else json.dumps(block, default=str)
    return {prefix.rstrip("."): text}


def task_metrics(acc_matrix: Sequence[Sequence[float]], acc_seen: Sequence[float]) -> dict:
    """The metrics after the last row's task: seen-class accuracy, its running mean and
    the accuracy on each task's classes."""
    k = len(acc_seen)
    values = {"acc_seen": acc_seen[-1], "avg_acc": sum(acc_seen) / k}
    values.update({f"acc_task_{j + 1}": a for j, a in enumerate(acc_matrix[-1])})
    return values


def final_metrics(record: dict) -> dict[str, float]:
    """The run's summary numbers (those that are set) under ``final/``."""
    accounting, timing = record.get("accounting") or {}, record.get("timing") or {}
    found = {
        "avg_acc": record.get("avg_acc"),
        "last_acc": record.get("last_acc"),
        "forgetting": record.get("forgetting"),
        "bwt": record.get("bwt"),
        "added_params": (accounting.get("added_per_task") or [None])[-1],
        "stored_params": accounting.get("stored_at_end"),
        "gflops": accounting.get("inference_gflops_per_image"),
        "train_s": timing.get("train_s"),
    }
    return {f"final/{k}": float(v) for k, v in found.items() if isinstance(v, (int, float))}


class CsvBackend:
    """``metrics.csv`` (task, name, value) and ``config.csv`` (key, value)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.file = (folder / "metrics.csv").open("a", newline="", encoding="utf-8")
        self.rows = csv.writer(self.file)
        if self.file.tell() == 0:
            self.rows.writerow(["task", "name", "value"])

    def metrics(self, values: dict[str, float], step: int) -> None:
        self.rows.writerows([step, name, value] for name, value in values.items())
        self.file.flush()

    def config(self, flat: dict[str, str]) -> None:
        with (self.folder / "config.csv").open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([["key", "value"], *sorted(flat.items())])

    def close(self) -> None:
        self.file.close()


class AvalancheBackend:
    """An Avalanche logger fed through its ``log_single_metric``."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger

    def metrics(self, values: dict[str, float], step: int) -> None:
        for name, value in values.items():
            self.logger.log_single_metric(name, value, step)

    def config(self, flat: dict[str, str]) -> None:
        writer = getattr(self.logger, "writer", None)  # TensorBoard: the config as text
        if writer is not None:
            writer.add_text("config", json.dumps(flat, indent=1, sort_keys=True))
            writer.flush()

    def close(self) -> None:
        writer = getattr(self.logger, "writer", None)
        if writer is not None:
            writer.close()


class WandbBackend:
    """One W&B run in ``folder``, offline unless ``WANDB_MODE`` says otherwise. Through
    wandb itself: Avalanche's WandBLogger calls wandb functions that this wandb no longer
    has (``wandb.viz``, ``wandb.util.generate_id``)."""

    def __init__(self, folder: Path, name: str) -> None:
        import wandb

        folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project="cl-bench",
            name=name,
            id=uuid.uuid4().hex,
            dir=folder,
            mode=os.environ.get("WANDB_MODE", "offline"),  # type: ignore[arg-type]
            settings=wandb.Settings(console="off", save_code=False, silent=True),
            reinit="create_new",
        )

    def metrics(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def config(self, flat: dict[str, str]) -> None:
        self.run.config.update(flat, allow_val_change=True)

    def close(self) -> None:
        self.run.finish()


class MlflowBackend:
    """One MLflow run in ``<folder>/mlflow`` (a file store) or ``$MLFLOW_TRACKING_URI``."""

    def __init__(self, folder: Path, name: str) -> None:
        import mlflow

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # a local file store, which MLflow keeps for this with the opt-in below
            uri = (folder / "mlflow").resolve().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name("cl-bench")
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment("cl-bench")
        )
        self.run_id = self.client.create_run(experiment_id, run_name=name).info.run_id

    def metrics(self, values: dict[str, float], step: int) -> None:
        for name, value in values.items():
            self.client.log_metric(self.run_id, name.replace("/", "_"), value, step=step)

    def config(self, flat: dict[str, str]) -> None:
        for key, value in sorted(flat.items()):
            self.client.log_param(self.run_id, key, value[:6000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _warn(tracker: str, e: Exception) -> None:
    print(
        f"warning: tracker {tracker} failed ({type(e).__name__}: {e}); the run goes on without it.",
        file=sys.stderr,
        flush=True,
    )


class Tracking:
    """The trackers of one run: :meth:`task` after each task, :meth:`finish` once. A
    tracker that fails is reported and left out; the run and its result go on."""

    def __init__(self, backends: list[Backend]) -> None:
        self.backends = backends

    def _each(self, call: Callable[[Backend], None]) -> None:
        for backend in list(self.backends):
            try:
                call(backend)
            except Exception as e:  # noqa: BLE001 - a tracker never costs the run
                self.backends.remove(backend)
                _warn(type(backend).__name__, e)

    def task(self, acc_matrix: Sequence[Sequence[float]], acc_seen: Sequence[float]) -> None:
        values = task_metrics(acc_matrix, acc_seen)
        self._each(lambda backend: backend.metrics(values, len(acc_seen)))

    def finish(self, record: dict) -> None:
        steps = len(record.get("acc_seen") or []) or 1
        flat, final = flatten(record.get("config", {})), final_metrics(record)

        def close(backend: Backend) -> None:
            backend.metrics(final, steps)
            backend.config(flat)
            backend.close()

        self._each(close)


def _backend(tracker: str, folder: Path, name: str) -> Backend:
    if tracker == "csv":
        return CsvBackend(folder / "csv")
    if tracker == "tensorboard":
        from avalanche.logging import TensorboardLogger

        return AvalancheBackend(TensorboardLogger(folder / "tensorboard"))
    if tracker == "wandb":
        return WandbBackend(folder / "wandb", name)
    return MlflowBackend(folder, name)


def open_trackers(names: Iterable[str], result: Path, loggers: Sequence[Any] = ()) -> Tracking:
    """The trackers ``names`` for the run whose result file is ``result``, and
    ``loggers``: Avalanche loggers of the caller's own (``log_single_metric``). A tracker
    that cannot start (an unwritable folder, a damaged store) is reported and left out,
    as one that fails later is."""
    folder = log_folder(result)
    name = f"{result.parent.parent.name}/{result.parent.name}/{result.stem}"
    backends: list[Backend] = [AvalancheBackend(logger) for logger in loggers]
    for tracker in names:
        try:
            backends.append(_backend(tracker, folder, name))
        except Exception as e:  # noqa: BLE001 - a tracker never costs the run
            _warn(tracker, e)
    return Tracking(backends)
