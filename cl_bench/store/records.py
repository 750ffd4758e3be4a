"""Typed result records: the one place a result file becomes something to read.

A :class:`Result` is built only from a record that :mod:`cl_bench.store.record_check`
accepts (:meth:`Result.from_file`, :meth:`Result.from_dict`), so every reader
(``report``, ``status``, ``check``, the summary of ``run``, :func:`cl_bench.load_results`)
sees the same fields, already checked, and none of them digs in the JSON itself.
A file that is not a complete, valid record raises :class:`InvalidResult`, saying why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cl_bench.packages import recorded
from cl_bench.store.protocol_block import FAIR, upgraded
from cl_bench.store.record_check import problems, reason
from cl_bench.store.results import InvalidResult, load_valid, run_path
from cl_bench.store.schema import config_hash
from cl_bench.store.staleness import stale_reasons

__all__ = ["DEFAULT_PROTOCOL", "InvalidResult", "Result"]

DEFAULT_PROTOCOL = FAIR  # the protocol of a record that names none
WEIGHT_FILES = {".pth", ".pt", ".safetensors", ".npz"}


def _total(value: float | list[float]) -> float:
    """A timing field: per task (a list, summed) or one number."""
    return sum(value) if isinstance(value, list) else value


def _gib(value: int | None) -> float:
    """Bytes in GiB; NaN where the record has none (a CPU run's CUDA peak)."""
    return float("nan") if value is None else value / 2**30


def flatten(d: dict, prefix: str = "") -> dict:
    """``{"method": {"lr": 0.1}}`` -> ``{"method.lr": 0.1}``."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(flatten(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


@dataclass(frozen=True)
class Result:
    """One finished run (method x scenario x seed x configuration), as validated.

    Accuracies are in percent. The fields cannot be reassigned; the lists and dicts
    are the file's own values and are meant to be read, not changed. ``path`` is the
    result file (None for a record that was never placed in a results folder).
    """

    method: str
    scenario: str
    seed: int
    status: str
    config: dict[str, Any]
    config_hash: str
    protocol: dict[str, Any]
    class_order: list[int]
    tasks: list[list[int]]
    acc_matrix: list[list[float]]
    acc_seen: list[float]
    avg_acc: float
    last_acc: float
    acc_task_mean: list[float]
    avg_acc_task_mean: float
    last_acc_task_mean: float
    forgetting: float | None
    bwt: float | None
    routing_acc: list[float | None] | None
    accounting: dict[str, Any]
    timing: dict[str, Any]
    memory: dict[str, Any]
    env: dict[str, Any]
    class_names: list[str] | None = None
    created: str | None = None
    code: dict[str, Any] | None = None
    config_file: dict[str, str] | None = None
    path: Path | None = None

    @classmethod
    def from_file(cls, path: str | Path) -> Result:
        """The result at ``path``. FileNotFoundError: no file (the run is not finished);
        :class:`InvalidResult`: a file that is not a complete, valid record of that path."""
        path = Path(path)
        return cls._build(load_valid(path), path)

    @classmethod
    def from_dict(cls, record: object, path: str | Path | None = None) -> Result:
        """A result from a parsed record; with ``path``, the record must also be the one
        that path names (scenario and method folders, seed and config hash)."""
        found = problems(record, None if path is None else Path(path))
        if found:
            raise InvalidResult(reason(found))
        return cls._build(upgraded(record), None if path is None else Path(path))

    @classmethod
    def from_run(cls, record: dict, out: str | Path) -> Result:
        """A record :mod:`cl_bench.engine.runner` returned for results folder ``out``, with the
        path it was written to."""
        result = cls.from_dict(record)
        return dataclasses.replace(
            result,
            path=run_path(Path(out), result.scenario, result.method, result.seed, result.config),
        )

    @classmethod
    def _build(cls, record: dict, path: Path | None) -> Result:
        """Only ever called with a record :func:`cl_bench.store.record_check.problems` passed."""
        names = {f.name for f in dataclasses.fields(cls)} - {"config_hash", "path"}
        return cls(
            **{name: record.get(name) for name in names},
            config_hash=config_hash(record["config"]),
            path=path,
        )

    def staleness(self) -> list[str]:
        """What differs between the code and packages that made this result and those
        installed now (:mod:`cl_bench.store.staleness`); [] when it is current."""
        return stale_reasons({"code": self.code, "env": self.env})

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def key(self) -> tuple[str, str, int, str]:
        """(scenario, method, seed, config hash): the run; equal keys are one run."""
        return self.scenario, self.method, self.seed, self.config_hash

    @property
    def protocol_name(self) -> str:
        """The evaluation protocol the run followed ("fair" or "paper")."""
        return self.protocol.get("name") or DEFAULT_PROTOCOL

    @property
    def protocol_settings(self) -> dict[str, Any]:
        """The method's declared protocol settings and their values (e.g. TOSCA's
        ``{"selection": "sample", "augment_views": 0, "eval_batch_size": 48}``)."""
        return self.protocol["settings"]

    @property
    def protocol_meanings(self) -> dict[str, str]:
        """Each declared protocol setting's one-line meaning."""
        return self.protocol["meanings"]

    @property
    def protocol_label(self) -> list[str]:
        """How a label names the run's protocol, in parts (e.g. ``["selection=batch",
        "ordered test", "batches of 48"]``)."""
        return self.protocol["label"]

    @property
    def per_batch(self) -> bool:
        """Whether a prediction depends on the rest of its test batch (a rule applied per
        batch), so the evaluation batch size matters."""
        return self.protocol["per_batch"]

    @property
    def test_shuffle(self) -> bool | None:
        return self.protocol.get("test_shuffle")

    @property
    def config_source(self) -> str:
        """``run.yaml (sha256 3f2a...)``: the config file the run came from, or "" (the
        command line or the Python API)."""
        found = self.config_file
        return "" if found is None else f"{found['path']} (sha256 {found['sha256']})"

    @property
    def tuned(self) -> str:
        """``tuned`` (settings a search on this scenario chose), ``tuned on NAME`` (on
        another scenario), or "" (settings as the card and --set gave them)."""
        found = self.config.get("tuned")
        if not isinstance(found, dict):
            return ""
        return "tuned" if found.get("on") == self.scenario else f"tuned on {found.get('on')}"

    @property
    def marks(self) -> str:
        """What a label adds after the method's name: ``[tuned]`` and, for a run scored on
        a validation split instead of the test set, ``[validation]``."""
        tags = [self.tuned] if self.tuned else []
        tags += ["validation"] if self.config.get("validation") else []
        return "".join(f" [{t}]" for t in tags)

    @property
    def backbone(self) -> str:
        return self.config["backbone"]["name"]

    @property
    def device(self) -> str:
        """``cpu``, or ``cuda sm_90`` (``cuda sm_90 fast`` without strict determinism):
        the device's part of the config hash (absent in a CPU run's config)."""
        found = self.config.get("device")
        if not isinstance(found, dict):
            return "cpu"
        fast = " fast" if found.get("deterministic") == "fast" else ""
        return f"{found.get('kind', '?')} {found.get('arch', '?')}{fast}"

    @property
    def weights_kind(self) -> str:
        """'pretrained' (pinned tag), 'random', or 'file <digest>' (two local files differ)."""
        backbone = self.config["backbone"]
        weights = str(backbone.get("weights", ""))
        if weights == "random":
            return "random"
        if Path(weights).is_absolute() or Path(weights).suffix in WEIGHT_FILES:
            return f"file {str(backbone.get('weights_digest', ''))[:8]}"
        return "pretrained"

    @property
    def added_params(self) -> int:
        """Parameters the last task added."""
        return self.accounting["added_per_task"][-1]

    @property
    def stored_params(self) -> int:
        """Everything kept beyond the backbone at the end of the stream."""
        return self.accounting["stored_at_end"]

    @property
    def gflops(self) -> float:
        """Inference GFLOPs per image at the end of the stream."""
        return self.accounting["inference_gflops_per_image"]

    @property
    def train_s(self) -> float:
        """Training time summed over tasks (shared feature extraction excluded)."""
        return _total(self.timing["train_s"])

    @property
    def total_s(self) -> float:
        return _total(self.timing["total_s"])

    @property
    def seen_classes(self) -> list[int]:
        """Classes seen after each task."""
        sizes = [len(t) for t in self.tasks]
        return [sum(sizes[: i + 1]) for i in range(len(sizes))]

    def row(self, root: str | Path | None = None) -> dict[str, Any]:
        """The flat row of the report's runs table (and :func:`cl_bench.load_results`);
        ``file`` relative to ``root``, the results folder, so a committed CSV names no
        local folder."""
        file = self.path if root is None or self.path is None else self.path.relative_to(root)
        return {
            "scenario": self.scenario,
            "method": self.method,
            "seed": self.seed,
            "config": self.config_hash,
            "protocol": self.protocol_name,
            "tuned": self.tuned,
            "marks": self.marks,
            "backbone": self.backbone,
            "weights": self.weights_kind,
            "device": self.device,
            "protocol_label": ", ".join(self.protocol_label),
            "protocol_settings": "; ".join(f"{k}={v}" for k, v in self.protocol_settings.items()),
            "protocol_meanings": self.protocol_meanings,
            "test_shuffle": self.test_shuffle,
            "avg_acc": self.avg_acc,
            "last_acc": self.last_acc,
            "forgetting": self.forgetting,
            "added_params": self.added_params,
            "stored_params": self.stored_params,
            "gflops": self.gflops,
            "train_s": self.train_s,
            "total_s": self.total_s,
            "peak_rss_gib": _gib(self.memory.get("peak_rss_bytes")),
            "gpu_peak_gib": _gib(self.memory.get("cuda_max_allocated_bytes")),
            "acc_seen": self.acc_seen,
            "acc_matrix": self.acc_matrix,
            "seen_classes": self.seen_classes,
            "flat_config": flatten(self.config),
            "packages": recorded(self.env),
            "stale": "; ".join(self.staleness()),
            "config_file": self.config_source,
            "file": None if file is None else str(file),
        }
