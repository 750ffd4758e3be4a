"""What a valid result record is: the one judge of every file ``cl-bench run`` reads
back as finished and ``status``, ``report`` and ``check`` read as results.

A record counts only when every number a reader uses is there, of the right type,
finite, in range and consistent with the others (the summary numbers are recomputed
from the accuracy matrix), and the record belongs to the path it lies at (scenario
and method folders, seed and config hash in the file name). Every other number of
the record (its resolved config, memory) is finite too. Anything else, from a
torn write to a hand-edited or foreign file, is reported as a list of problems
worded to name the field, so the run is recomputed and the user is told why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

from cl_bench.cards.protocol import PROTOCOLS
from cl_bench.metrics import summarize
from cl_bench.store.device_block import device_problems
from cl_bench.store.schema import READABLE_VERSIONS, SCHEMA_VERSION, config_hash

REQUIRED = (
    "schema_version",
    "method",
    "scenario",
    "seed",
    "status",
    "config",
    "class_order",
    "tasks",
    "protocol",
    "env",
    "acc_matrix",
    "acc_seen",
    "avg_acc",
    "last_acc",
    "acc_task_mean",
    "avg_acc_task_mean",
    "last_acc_task_mean",
    "forgetting",
    "bwt",
    "routing_acc",
    "accounting",
    "timing",
    "memory",
)
SUMMARY_NUMBERS = (
    "avg_acc",
    "last_acc",
    "avg_acc_task_mean",
    "last_acc_task_mean",
    "forgetting",
    "bwt",
)
ACCOUNTING_READ = ("added_per_task", "stored_at_end", "inference_gflops_per_image")
TIMING_READ = ("train_s", "total_s")
TIMING_OTHER = {
    "features_from": lambda v: v is None or isinstance(v, str),
    "resumed_from_task": lambda v: (
        v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
    ),
    "threads": lambda v: (
        isinstance(v, dict)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in v.values())
    ),
}
TIMING_OTHER_WORDS = {
    "features_from": "a name",
    "resumed_from_task": "a task number",
    "threads": "thread counts per phase",
}
LAYERED = (
    "acc_matrix",
    "acc_seen",
    "routing_acc",
    "acc_task_mean",
    *SUMMARY_NUMBERS,
    "accounting",
    "timing",
)  # keys whose numbers the layered checks look at
TOLERANCE = 1e-6
SHOWN = 3  # problems named in a one-line reason


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def number_problem(value: object, where: str, percent: bool = False) -> str | None:
    """Why ``value`` is not a finite number (in [0, 100] when ``percent``), or None."""
    if not _is_number(value):
        return f"{where} is {value!r}, not a number"
    if not math.isfinite(value):
        return f"{where} is {value!r}, not a finite number"
    if percent and not 0 <= value <= 100:
        return f"{where} is {value!r}, not a percentage in [0, 100]"
    return None


def _int_problem(value: object, where: str) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    return f"{where} is {value!r}, not an integer"


def _list_problems(
    value: object,
    where: str,
    check: Callable[[object, str], str | None],
    length: int | None = None,
    per: str = "one per task",
) -> list[str]:
    """Problems of a list whose items all pass ``check`` (and of ``length`` items)."""
    if not isinstance(value, list):
        return [f"{where} is {type(value).__name__}, not a list"]
    if length is not None and len(value) != length:
        return [f"{where} has {len(value)} entries, not {length} ({per})"]
    return [p for i, item in enumerate(value) if (p := check(item, f"{where}[{i}]"))]


def _percent(value: object, where: str) -> str | None:
    return number_problem(value, where, percent=True)


def _percent_or_none(value: object, where: str) -> str | None:
    return None if value is None else _percent(value, where)


def _numbers(value: object, where: str) -> str | None:
    """A finite number or a list of them (the fields of ``accounting`` and ``timing``)."""
    if isinstance(value, list):
        return next(iter(_list_problems(value, where, number_problem)), None)
    return number_problem(value, where)


def _place_problems(record: dict, path: Path) -> list[str]:
    """The record must be the one its path names: ``<scenario>/<method>/<seed>-<hash>``."""
    out = []
    for key, folder in (("scenario", path.parent.parent.name), ("method", path.parent.name)):
        if not isinstance(record[key], str):
            out.append(f"{key} is {record[key]!r}, not a name")
        elif record[key] != folder:
            out.append(f"{key} is {record[key]!r} but the file lies in folder {folder!r}")
    seed, _, digest = path.stem.partition("-")
    if (problem := _int_problem(record["seed"], "seed")) is not None:
        out.append(problem)
    elif seed != str(record["seed"]):
        out.append(
            f"seed is {record['seed']} but the file is named {path.name} "
            "(<seed>-<config hash>.json)"
        )
    if isinstance(record["config"], dict) and digest != config_hash(record["config"]):
        out.append(
            f"config hashes to {config_hash(record['config'])}, not to the "
            f"{digest or '(missing)'} of the file name {path.name}"
        )
    return out


def _shape_problems(record: dict) -> list[str]:
    """The dicts readers index into, and the task list every per-task field follows."""
    out = [
        f"{key} is {type(record[key]).__name__}, not an object"
        for key in ("config", "protocol", "env", "accounting", "timing", "memory")
        if not isinstance(record[key], dict)
    ]
    config = record["config"]
    if isinstance(config, dict):
        out += [
            f"config.{key} is missing or not an object"
            for key in ("method", "scenario", "backbone")
            if not isinstance(config.get(key), dict)
        ]
        if isinstance(config.get("backbone"), dict) and not isinstance(
            config["backbone"].get("name"), str
        ):
            out.append("config.backbone.name is missing or not a name")
        out += device_problems(config)
    out += _protocol_problems(record)
    order = _list_problems(record["class_order"], "class_order", _int_problem)
    tasks = record["tasks"]
    order += _list_problems(
        tasks, "tasks", lambda t, where: next(iter(_list_problems(t, where, _int_problem)), None)
    )
    if not order and not tasks:
        order = ["tasks is empty"]
    elif not order and [c for t in tasks for c in t] != record["class_order"]:
        order = ["tasks, joined, are not class_order"]
    return out + order


def _protocol_problems(record: dict) -> list[str]:
    """``protocol.name`` (absent in records from before protocols were named: fair) is a
    known protocol and the one the hashed config names (a non-fair run's config holds
    ``protocol``; see :mod:`cl_bench.cards.protocol`); in schema 2, the declared
    settings' block is whole (:mod:`cl_bench.store.protocol_block`)."""
    if not isinstance(record["protocol"], dict) or not isinstance(record["config"], dict):
        return []
    name = record["protocol"].get("name", "fair")
    if name not in PROTOCOLS:
        return [f"protocol.name is {name!r}, not one of {', '.join(PROTOCOLS)}"]
    hashed = record["config"].get("protocol", "fair")
    if hashed != name:
        return [f"protocol.name is {name!r} but the config was run under {hashed!r}"]
    new = record["schema_version"] == SCHEMA_VERSION
    return _declared_problems(record["protocol"]) if new else []


def _declared_problems(protocol: dict) -> list[str]:
    """A schema-2 ``protocol``: ``settings`` and their ``meanings`` (one text per
    setting), ``per_batch`` true or false, ``label`` a list of texts."""
    settings, meanings = protocol.get("settings"), protocol.get("meanings")
    if not isinstance(settings, dict):
        return [f"protocol.settings is {settings!r}, not an object"]
    if (
        not isinstance(meanings, dict)
        or set(meanings) != set(settings)
        or not all(isinstance(m, str) for m in meanings.values())
    ):
        return [f"protocol.meanings is {meanings!r}, not a text for each of protocol.settings"]
    out = (
        []
        if isinstance(protocol.get("per_batch"), bool)
        else [f"protocol.per_batch is {protocol.get('per_batch')!r}, not true or false"]
    )
    label = protocol.get("label")
    if not isinstance(label, list) or not all(isinstance(t, str) for t in label):
        out.append(f"protocol.label is {label!r}, not a list of texts")
    return out


def _code_problems(record: dict) -> list[str]:
    """``code`` (absent in records written before results named their code: those are
    stale, :mod:`cl_bench.store.staleness`): a ``digest`` text and ``modules``, a
    non-empty map of source file names to digest texts."""
    if "code" not in record:
        return []
    code = record["code"]
    if not isinstance(code, dict):
        return [f"code is {type(code).__name__}, not an object"]
    out = (
        []
        if isinstance(code.get("digest"), str)
        else [f"code.digest is {code.get('digest')!r}, not a text"]
    )
    modules = code.get("modules")
    if (
        not isinstance(modules, dict)
        or not modules
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in modules.items())
    ):
        out.append("code.modules is not a map of source file names to digests")
    return out


def _config_file_problems(record: dict) -> list[str]:
    """``config_file`` (only in a record of a run started from a config file): a ``path``
    text and a ``sha256`` of hex digits."""
    if "config_file" not in record:
        return []
    found = record["config_file"]
    if (
        isinstance(found, dict)
        and isinstance(found.get("path"), str)
        and isinstance(found.get("sha256"), str)
        and re.fullmatch("[0-9a-f]{12,64}", found["sha256"])
    ):
        return []
    return [f"config_file is {found!r}, not a path and a sha256 digest"]


def _accuracy_problems(record: dict, n_tasks: int) -> list[str]:
    """The accuracy matrix (lower-triangular, row i of i+1 entries), accuracy on seen
    classes and routing: one per task, each a percentage."""
    matrix = record["acc_matrix"]
    out = _list_problems(matrix, "acc_matrix", lambda row, where: None, n_tasks)
    if not out:
        for i, row in enumerate(matrix):
            out += _list_problems(
                row, f"acc_matrix[{i}]", _percent, i + 1, f"tasks 0..{i}, after training task {i}"
            )
    out += _list_problems(record["acc_seen"], "acc_seen", _percent, n_tasks)
    if record["routing_acc"] is not None:
        out += _list_problems(record["routing_acc"], "routing_acc", _percent_or_none, n_tasks)
    return out


def _summary_problems(record: dict, compare: bool) -> list[str]:
    """Each summary number is a finite number (``acc_task_mean`` a list of them;
    forgetting and BWT may be null) and, when ``compare`` (the matrix and ``acc_seen``
    are well formed), what :func:`cl_bench.metrics.summarize` makes of them."""
    out = _list_problems(record["acc_task_mean"], "acc_task_mean", number_problem)
    out += [
        problem
        for key in SUMMARY_NUMBERS
        if not (record[key] is None and key in ("forgetting", "bwt"))
        and (problem := number_problem(record[key], key)) is not None
    ]
    if out or not compare:
        return out
    for key, expected in summarize(record["acc_matrix"], record["acc_seen"]).items():
        value = record[key]
        if isinstance(expected, list):
            wrong = len(value) != len(expected) or any(
                abs(v - e) > TOLERANCE for v, e in zip(value, expected, strict=False)
            )
        elif expected is None or value is None:
            wrong = value is not expected
        else:
            wrong = abs(value - expected) > TOLERANCE
        if wrong:
            out.append(f"{key} is {value!r} but acc_seen and acc_matrix give {expected!r}")
    return out


def _block_problems(record: dict) -> list[str]:
    """``accounting`` and ``timing``: the fields readers use are present, and every
    field is a finite number or a list of them, except the timing fields that name
    something (``features_from``, ``resumed_from_task``, the ``threads`` per phase)."""
    out = []
    for block, read in (("accounting", ACCOUNTING_READ), ("timing", TIMING_READ)):
        fields = record[block]
        out += [f"{block}.{key} is missing" for key in read if key not in fields]
        for key, value in fields.items():
            if block == "timing" and key in TIMING_OTHER:
                if not TIMING_OTHER[key](value):
                    out.append(f"timing.{key} is {value!r}, not {TIMING_OTHER_WORDS[key]}")
            elif (problem := _numbers(value, f"{block}.{key}")) is not None:
                out.append(problem)
    if (
        isinstance(record["accounting"].get("added_per_task"), list)
        and not record["accounting"]["added_per_task"]
    ):
        out.append("accounting.added_per_task is empty")
    return out


def _finite_problems(value: object, where: str) -> list[str]:
    """Every inf or NaN anywhere below ``value`` (JSON writes them as ``Infinity`` and
    ``NaN``, which ``json`` reads back as floats)."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [f"{where} is {value!r}, not a finite number"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _finite_problems(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _finite_problems(v, f"{where}[{i}]")]
    return []


def _other_numbers_problems(record: dict) -> list[str]:
    """The numbers the layered checks do not look at (the resolved config, protocol,
    memory, extra keys) are finite too: a run whose config says ``lr: Infinity`` is not
    a result, whatever its accuracy."""
    return [
        p
        for key, value in record.items()
        if key not in LAYERED
        for p in _finite_problems(value, key)
    ]


def problems(record: object, path: Path | None = None) -> list[str]:
    """Everything wrong with a result record, worded for a user (empty: valid).

    ``path``, where the record was read from, adds the checks that it belongs there.
    Checks run in layers (a record of another schema or with missing keys is not
    looked into further; the summary numbers are compared only with a well-formed
    matrix), so each problem named is a real one and not a consequence of another.
    """
    if not isinstance(record, dict):
        kind = {list: "a JSON list", str: "a JSON string", type(None): "JSON null"}.get(
            type(record), "a JSON number or boolean"
        )
        return [f"{kind}, not a result record (a JSON object)"]
    if "schema_version" not in record:
        return [f"no schema_version (this cl-bench writes {SCHEMA_VERSION}): not a result record"]
    version = record["schema_version"]
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        readable = ", ".join(map(str, READABLE_VERSIONS))
        return [
            f"schema_version is {version!r}, not one this cl-bench reads ({readable}; "
            f"it writes {SCHEMA_VERSION})"
        ]
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        return [f"missing key{'s' * (len(missing) > 1)}: {', '.join(missing)}"]
    out = [] if record["status"] == "done" else [f"status is {record['status']!r}, not 'done'"]
    out += _other_numbers_problems(record)
    out += _place_problems(record, Path(path)) if path is not None else []
    shape = _shape_problems(record) + _code_problems(record) + _config_file_problems(record)
    out += shape
    if shape:
        return out
    accuracy = _accuracy_problems(record, len(record["tasks"]))
    out += accuracy + _summary_problems(record, compare=not accuracy)
    return out + _block_problems(record)


def reason(found: list[str]) -> str:
    """The first problems on one line, with a count of the rest."""
    more = len(found) - SHOWN
    return "; ".join(found[:SHOWN]) + (f" (and {more} more)" if more > 0 else "")
