"""The committed measurements: one JSON file per measurement under ``bench/results/``.

Every file names its figure (an ``id`` of ``bench/figures.yaml``, which says what the
figure measures, the command that makes it and its target) and carries a ``meta`` block
that ties it to a machine and a code version, plus the ``headline`` rows a reader
compares; anything else in the file is that bench's raw output::

    {"figure": "extraction-engines",
     "meta": {"date": "2026-12-06", "cpu": "Intel Xeon with AMX, 2 cores",
              "precision": "fp32, bf16", "commit": "301e76a",
              "command": "python -m bench.extraction_engines 256 32"},
     "headline": [{"label": "OpenVINO bf16 vs torch eager", "value": "7.49x"}],
     ...}

``meta.note`` (one sentence) is optional. The documentation site's performance page is
generated from these files (``load_all``), newest first per figure; ``write`` is how a
bench records a new one, with today's date, this CPU's model and the checkout's commit.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
FIGURES = ROOT / "bench" / "figures.yaml"
META_KEYS = ("date", "cpu", "precision", "commit")
FIGURE_KEYS = ("id", "title", "measures", "command", "target")


class MeasurementError(ValueError):
    """A committed measurement or the figure catalogue does not follow the schema above."""


@dataclass(frozen=True)
class Figure:
    id: str
    title: str
    measures: str
    command: str
    target: str


@dataclass(frozen=True)
class Measurement:
    path: Path
    figure: str
    date: str
    cpu: str
    precision: str
    commit: str
    command: str
    note: str
    headline: tuple[tuple[str, str], ...]


def load_figures(path: Path = FIGURES) -> dict[str, Figure]:
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(entries, list):
        raise MeasurementError(f"{path}: expected a list of figures, one mapping each")
    figures = {}
    for entry in entries:
        missing = [k for k in FIGURE_KEYS if not isinstance((entry or {}).get(k), str)]
        if missing:
            raise MeasurementError(
                f"{path}: figure {entry!r} lacks {', '.join(missing)} (each a string)"
            )
        if entry["id"] in figures:
            raise MeasurementError(f"{path}: figure id {entry['id']!r} appears twice")
        figures[entry["id"]] = Figure(**{k: entry[k] for k in FIGURE_KEYS})
    return figures


def read(path: Path, figures: dict[str, Figure]) -> Measurement:
    """One measurement file, checked against the schema and the figure catalogue."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise MeasurementError(f"{where}: not JSON ({exc})") from exc
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("figure"), str)
        or data["figure"] not in figures
    ):
        raise MeasurementError(
            f"{where}: 'figure' must be one of {sorted(figures)} (the ids of bench/figures.yaml)"
        )
    meta = data.get("meta")
    if not isinstance(meta, dict) or any(
        not isinstance(meta.get(k), str) or not meta[k] for k in META_KEYS
    ):
        raise MeasurementError(
            f"{where}: 'meta' must give {', '.join(META_KEYS)}, each a non-empty string"
        )
    try:
        datetime.date.fromisoformat(meta["date"])
    except ValueError as exc:
        raise MeasurementError(f"{where}: meta.date {meta['date']!r} is not YYYY-MM-DD") from exc
    if not re.fullmatch(r"[0-9a-f]{7,40}", meta["commit"]):
        raise MeasurementError(f"{where}: meta.commit {meta['commit']!r} is not a git commit hash")
    rows = data.get("headline")
    if (
        not isinstance(rows, list)
        or not rows
        or any(
            not isinstance(r, dict)
            or not isinstance(r.get("label"), str)
            or not isinstance(r.get("value"), str)
            for r in rows
        )
    ):
        raise MeasurementError(
            f'{where}: \'headline\' must be a non-empty list of {{"label": str, "value": str}}'
        )
    return Measurement(
        path,
        data["figure"],
        meta["date"],
        meta["cpu"],
        meta["precision"],
        meta["commit"],
        str(meta.get("command", "")),
        str(meta.get("note", "")),
        tuple((r["label"], r["value"]) for r in rows),
    )


def commit_times() -> dict[str, int]:
    """The commit time of every commit of this checkout's history, by full hash; empty
    where git cannot tell (no git, not a checkout)."""
    try:
        out = subprocess.run(
            ["git", "log", "--format=%H %ct"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {full: int(when) for full, when in (line.split() for line in out.splitlines())}


def load_all(results: Path = RESULTS, figures_path: Path = FIGURES) -> list[Measurement]:
    """Every measurement, newest first: by date, then (a date holds several) by the time
    of the commit measured, then by file name."""
    figures = load_figures(figures_path)
    found = [read(p, figures) for p in sorted(results.glob("*.json"))]
    times = commit_times()

    def when(m: Measurement) -> int:
        return next((t for full, t in times.items() if full.startswith(m.commit)), 0)

    return sorted(found, key=lambda m: (m.date, when(m), m.path.name), reverse=True)


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (``platform.processor()`` where there
    is no /proc/cpuinfo)."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def cpu_description() -> str:
    """``meta.cpu`` for a measurement made now: the model, the units its kernels are
    chosen for (:func:`cl_bench.cpu_flags.cpu_kind`, held to ``$ONEDNN_MAX_CPU_ISA``
    where that caps them) and the cores this process may use."""
    from cl_bench.cpu_flags import cpu_kind, isa_cap_setting

    cap = isa_cap_setting()
    kernels = f"{cpu_kind()} kernels" + (f", ONEDNN_MAX_CPU_ISA={cap}" if cap else "")
    return f"{cpu_model()} ({kernels}), {len(os.sched_getaffinity(0))} cores"


def cpu_slug() -> str:
    """A file-name part for this CPU: its model without trademarks, clock and filler
    words, and its kernels' kind (``intel-xeon-platinum-8480-amx``)."""
    from cl_bench.cpu_flags import cpu_kind

    model = re.sub(
        r"\((R|TM)\)|@.*$|\b(CPU|Processor|\d+-Core)\b", " ", cpu_model(), flags=re.IGNORECASE
    )
    words = re.findall(r"[a-z0-9]+", model.lower()) + [cpu_kind().replace("_", "-")]
    return "-".join(words)


# the variables that change which kernels or precision a bench measures: a recorded
# command names those that were set
KERNEL_VARIABLES = (
    "ONEDNN_MAX_CPU_ISA",
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "CL_BENCH_CPU_BF16",
    "CL_BENCH_FROZEN_RUNTIME",
)


def command_line(args: list[str]) -> str:
    """``meta.command`` for ``python ARGS`` run now: the kernel and precision variables
    that are set, then the command."""
    env = [f"{k}={os.environ[k]}" for k in KERNEL_VARIABLES if os.environ.get(k)]
    return " ".join([*env, "python", *args])


def head_commit() -> str:
    """The checkout's commit; refused with the fix where git cannot tell (a copy of the
    tree without its history, as on a lent GPU machine)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise MeasurementError(
            f"git cannot tell the commit of {ROOT} (no git, or a copy without its "
            "history): give it, e.g. --commit $(git rev-parse --short HEAD) run where "
            "the checkout is"
        ) from exc


def record(
    figure: str,
    headline: list[tuple[str, str]],
    data: dict,
    precision: str,
    command: str,
    note: str = "",
    cpu: str | None = None,
    commit: str | None = None,
) -> dict:
    """The record of a measurement made now (today's date; ``cpu`` defaults to
    :func:`cpu_description`, ``commit`` to :func:`head_commit`), not yet checked."""
    clash = {"figure", "meta", "headline"} & set(data)
    if clash:
        raise MeasurementError(f"the raw data may not use the keys {sorted(clash)}")
    return {
        "figure": figure,
        "meta": {
            "date": datetime.date.today().isoformat(),
            "cpu": cpu or cpu_description(),
            "precision": precision,
            "commit": commit or head_commit(),
            "command": command,
            **({"note": note} if note else {}),
        },
        "headline": [{"label": k, "value": v} for k, v in headline],
        **data,
    }


def checked_text(record: dict, name: str) -> str:
    """``record`` as the JSON text to commit, once it passed :func:`read` (as ``name``)."""
    text = json.dumps(record, indent=1, default=str) + "\n"
    with tempfile.TemporaryDirectory() as scratch:
        draft = Path(scratch) / name
        draft.write_text(text, encoding="utf-8")
        read(draft, load_figures())
    return text


def write(
    figure: str,
    headline: list[tuple[str, str]],
    data: dict,
    precision: str,
    command: str,
    slug: str | None = None,
    note: str = "",
    results: Path = RESULTS,
) -> Path:
    """Record a measurement made now on this machine as
    ``results/FIGURE-DATE-SLUG.json`` (``-2``, ``-3``, ... added where that name is
    taken: a measurement never replaces another) with today's date, this CPU
    (:func:`cpu_description`) and the checkout's commit; ``slug`` defaults to
    :func:`cpu_slug`. The record is checked against the schema before anything is
    written. ``data``: the bench's raw output, kept beside ``figure``, ``meta`` and
    ``headline``."""
    made = record(figure, headline, data, precision, command, note)
    results.mkdir(parents=True, exist_ok=True)
    stem = f"{figure}-{made['meta']['date']}-{slug or cpu_slug()}"
    text = checked_text(made, f"{stem}.json")
    path, n = results / f"{stem}.json", 1
    while path.exists():
        n += 1
        path = results / f"{stem}-{n}.json"
    path.write_text(text, encoding="utf-8")
    return path
