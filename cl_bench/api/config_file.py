"""Config files: a whole ``cl-bench run`` (or grid) in one YAML file, ``--config run.yaml``.

    methods: [tosca, simplecil]
    scenario: synthetic          # or scenarios: [fmnist, synthetic]
    seeds: [1993, 1994]
    sets:                        # as --set: one item per setting, commas sweep
      - tosca.lr=0.01,0.05
      - 'scenario.dataset_args={train_per_class: 6}'   # quoted: it has a colon
    precision: fp32
    out: results/lr-sweep
    launcher: local
    jobs: 2

The keys are ``cl-bench run``'s options with ``_`` for ``-`` (``image_size``,
``slurm_partition``, ...); ``name`` and ``description`` are free text. An option given on
the command line wins over the file; a ``--set`` of a setting replaces the file's items
for that setting. :func:`load_config` gives the file as keyword arguments of
:func:`cl_bench.run` (or :func:`cl_bench.run_grid`, with a launcher).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cl_bench.errors import UserError, suggest

__all__ = [
    "CONFIG_KEYS",
    "config_digest",
    "config_options",
    "config_record",
    "load_config",
    "merge_options",
]

TEXT = (
    *("protocol", "backbone", "weights", "device", "precision", "deterministic", "launcher"),
    *("slurm_partition", "slurm_gres", "slurm_gpu_arch"),
)
PATHS = ("data_root", "out")
WHOLE = ("image_size", "jobs", "slurm_gpus", "slurm_cpus", "slurm_time", "slurm_array_parallelism")
FLAGS = ("download", "progress", "wait", "slurm_requeue")
NUMBERS = ("validation",)
LISTS = ("methods", "scenario", "seeds", "sets")
FREE = ("name", "description")
CONFIG_KEYS = (*LISTS, *TEXT, *PATHS, *WHOLE, *FLAGS, *NUMBERS, *FREE)
ALIASES = {"scenarios": "scenario", "set": "sets"}
EXAMPLES = {
    "methods": "methods: [tosca, simplecil]",
    "scenario": "scenario: fmnist",
    "seeds": "seeds: [1993, 1994]",
    "sets": "sets: [tosca.lr=0.01, scenario.increment=2]",
}


def _read(path: Path) -> dict[object, object]:
    if not path.is_file():
        raise UserError(
            f"--config {path}: no such file; give a YAML file of run options, e.g. "
            "`methods: [tosca]` and `scenario: fmnist` (docs/usage.md, Config files)."
        )
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise UserError(f"--config {path} is not valid YAML ({e}); fix the file.") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(
            f"--config {path} must be a mapping of run options (e.g. `methods: [tosca]`), "
            f"not a {type(raw).__name__}."
        )
    return raw


def _listed(path: Path, key: str, value: object, kind: type) -> list[object]:
    items = value if isinstance(value, list) else [value]
    if key != "seeds" and isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()] if key != "sets" else [value]
    if not items or any(isinstance(v, bool) or not isinstance(v, kind) for v in items):
        said = "an integer" if kind is int else "a string"
        quote = (
            " (quote an item with a colon in it, YAML reads it as a mapping otherwise: "
            "- 'scenario.dataset_args={size: 8}')"
            if key == "sets"
            else ""
        )
        raise UserError(
            f"--config {path}: `{key}: {value!r}` must be {said} or a list of them, e.g. "
            f"`{EXAMPLES[key]}`{quote}."
        )
    return list(items)


def config_options(path: str | Path) -> dict[str, Any]:
    """The options of the config file ``path``, checked, by ``cl-bench run``'s parameter
    names: methods, scenario, sets (lists of strings), seeds (a list of integers), the
    others as they are (paths as :class:`~pathlib.Path`). Unknown keys are refused,
    naming the known ones; ``name`` and ``description`` are left out."""
    path = Path(path)
    found: dict[str, Any] = {}
    for key, value in _read(path).items():
        name = ALIASES.get(str(key), str(key))
        if name not in CONFIG_KEYS:
            raise UserError(
                f"--config {path} has the unknown key {key!r}.{suggest(str(key), CONFIG_KEYS)} "
                f"Known keys: {', '.join(CONFIG_KEYS)}."
            )
        if name in found:
            raise UserError(f"--config {path} gives {name} twice ({key!r}); keep one.")
        if name in FREE:
            continue
        found[name] = _checked(path, name, value)
    return found


def _checked(path: Path, name: str, value: object) -> object:
    if name in LISTS:
        return _listed(path, name, value, int if name == "seeds" else str)
    kinds: dict[str, tuple[type | tuple[type, ...], str]] = {
        **{k: (str, "a name") for k in TEXT},
        **{k: (str, "a folder") for k in PATHS},
        **{k: (int, "a whole number") for k in WHOLE},
        **{k: (bool, "true or false") for k in FLAGS},
        **{k: ((int, float), "a number") for k in NUMBERS},
    }
    kind, said = kinds[name]
    if value is None and name not in FLAGS:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise UserError(f"--config {path}: `{name}: {value!r}` must be {said}.")
    return Path(value).expanduser() if name in PATHS and isinstance(value, str) else value


def config_digest(path: str | Path) -> str:
    """The first 12 hex digits of the file's SHA-256: which version of it ran."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def config_record(path: str | Path) -> dict[str, str]:
    """What a run's record says of the config file it came from: ``{"path": as given,
    "sha256": its digest}`` (not part of the run's identity: the same run from the
    command line is the same result)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"config_file={str(path)!r}: no such file; give the YAML file the options came "
            'from, e.g. config_file="run.yaml" (cl_bench.load_config gives it), or leave it out.'
        )
    return {"path": str(path), "sha256": config_digest(path)}


def merge_options(
    given: Mapping[str, Any], defaults: Mapping[str, Any], from_file: Mapping[str, Any]
) -> dict[str, Any]:
    """``cl-bench run``'s options: those ``given`` on the command line, else the file's,
    else ``defaults``. The file's ``sets`` items stay where the command line sets no
    other value of the same setting (a ``--set`` of it replaces them)."""
    merged = {**defaults, **from_file, **given}
    if "sets" in given and "sets" in from_file:
        heads = {item.partition("=")[0].strip() for item in given["sets"]}
        kept = [s for s in from_file["sets"] if s.partition("=")[0].strip() not in heads]
        merged["sets"] = [*kept, *given["sets"]]
    return merged


def load_config(path: str | Path) -> dict[str, Any]:
    """The config file ``path`` as keyword arguments of :func:`cl_bench.run` (or, when it
    names a launcher, of :func:`cl_bench.run_grid`): ``cl_bench.run(**load_config(p))``;
    override a value by giving it after, ``{**load_config(p), "seeds": [1993]}``. Its
    ``sets`` become ``settings`` (each value read as on the command line: commas sweep),
    and ``config_file`` is ``path``, so that each run's record names the file and its
    digest."""
    options = config_options(path)
    sets = options.pop("sets", None)
    if sets is not None:
        settings = {}
        for item in sets:
            head, eq, value = item.partition("=")
            if not eq:
                raise UserError(
                    f'--config {path}: the sets item "{item}" is not of the form '
                    "owner.key=value, e.g. tosca.lr=0.01."
                )
            settings[head.strip()] = value
        options["settings"] = settings
    return {**options, "config_file": Path(path)}
