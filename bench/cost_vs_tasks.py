"""cost-vs-tasks: what every method costs per task as the stream grows, at toy size.

Every method card runs on the generated scenario ``synthetic-long`` (one class per
task: 4 training and 2 test images per class at 16 px) with T = 10, 50, 100 and 300
tasks, on a random-weight ViT-Tiny at 32 px in fp32, with every epoch count of the card
set to 1 (``epochs``, ``init_epochs``, ``fit_epochs``, ``ca_epochs``) and the card's other
defaults. Each run is an ordinary ``cl_bench.run`` (each method's runs in a process of
its own) watched by a plugin (:class:`Probe`) that records per task: the seconds of its
training (the method's own work after the epochs included), of the evaluation on every
class seen so far and of what runs before the next task (the run's checkpoint), the
size of that checkpoint, the peak resident set during its training and evaluation, the
parameters stored beyond the backbone, and, for one test image after the task, the
backbone passes (rows through a ViT's patch embedding) and the GFLOPs
(``FlopCounterMode``, attention included). A run that has spent its time budget
(``--budget``, seconds from its first task per stream length: most of it to the longest
stream, which the drawing shows) stops after the task it is on and is recorded as
stopped at that task; a setting the run refuses (the memory estimate, a
card's own check) is recorded with its message. A joint method trains once on every
task, then is evaluated on each prefix: its rows are those evaluations.

    python -m bench.cost_vs_tasks                     # every card, T = 10 50 100 300
    python -m bench.cost_vs_tasks --methods simplecil,tosca --lengths 10,50 --budget 20
    python -m bench.cost_vs_tasks --budget 10:60,50:30,100:30,300:180   # the default
    python -m bench.cost_vs_tasks --no-record         # print, record nothing

Prints one JSON line per run and records ``bench/results/cost-vs-tasks-DATE-CPU.json``
(:func:`bench.measurements.write`); the documentation's Performance page draws it
(:mod:`bench.cost_vs_tasks_plot`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from avalanche.core import SupervisedPlugin

LENGTHS = (10, 50, 100, 300)
BUDGETS = "10:60,50:30,100:30,300:180"  # seconds per stream length: most to the longest
BUDGET_S = 60.0  # a length the budgets do not name
SCENARIO = "synthetic-long"
SEED = 1993
TOY = dict(backbone="vit_tiny_patch16_224", weights="random", image_size=32, precision="fp32")
EPOCH_KEYS = ("epochs", "init_epochs", "fit_epochs", "ca_epochs")
# a process whose run neither ends nor reaches the end of a task in its budget and this
# long after it is killed (its setup, or one task that does not end)
GRACE_S = 600.0
PER_TASK = (
    "train_s",
    "eval_s",
    "checkpoint_s",
    "checkpoint_bytes",
    "peak_rss_bytes",
    "stored_params",
    "passes_per_image",
    "gflops_per_image",
)


class OverBudget(Exception):
    """A run stopped after task ``done`` of its stream, its budget spent."""

    def __init__(self, done: int) -> None:
        super().__init__(f"stopped at task {done}: time budget spent")
        self.done = done


def resident() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def counted_image(strategy, backbone) -> tuple[int, int]:
    """(backbone passes, FLOPs) of classifying one test image with what ``strategy``
    keeps now: passes are the image rows through the patch embedding of a ViT like
    ``backbone`` (each full pass embeds its image once)."""
    import torch

    from cl_bench.accounting.count import inference_flops

    kind = type(backbone.model.patch_embed)
    rows = [0]

    def count(module, inputs, output) -> None:
        if isinstance(module, kind):
            rows[0] += inputs[0].shape[0]

    handle = torch.nn.modules.module.register_module_forward_hook(count)
    try:
        flops = inference_flops(strategy, backbone)
    finally:
        handle.remove()
    return rows[0], flops


class Probe(SupervisedPlugin):
    """Per-task costs of the run it joins (module docstring); raises :class:`OverBudget`
    after the evaluation of a task that ends past ``budget_s`` seconds from the first
    task's start, unless it was the last. ``out``: the run's result folder, where its
    checkpoint is written."""

    def __init__(self, tasks: int, budget_s: float, out: Path) -> None:
        super().__init__()
        self.tasks, self.budget_s, self.out = tasks, budget_s, out
        self.rows = {key: [] for key in PER_TASK}
        self.start: float | None = None
        self.rss_start: int | None = None
        self._trained = 0.0
        self._ended: float | None = None

    def _checkpoint_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.out.rglob("*.ckpt"))

    def before_training(self, strategy, **kwargs) -> None:
        import torch

        from cl_bench.engine.environment import reset_peak_memory

        now = time.perf_counter()
        if self.start is None:
            self.start, self.rss_start = now, resident()
        if self._ended is not None:  # what ran since the last task: its checkpoint
            self.rows["checkpoint_s"][-1] = now - self._ended
            self.rows["checkpoint_bytes"][-1] = self._checkpoint_bytes()
        reset_peak_memory(torch.device("cpu"))
        self._t0 = now

    def after_training(self, strategy, **kwargs) -> None:
        self._trained = time.perf_counter() - self._t0

    def before_eval(self, strategy, **kwargs) -> None:
        self._e0 = time.perf_counter()

    def after_eval(self, strategy, **kwargs) -> None:
        from cl_bench.accounting.count import stored_params
        from cl_bench.engine.environment import run_peak_rss
        from cl_bench.engine.recording import Recorder

        evaluated = time.perf_counter() - self._e0
        peak = run_peak_rss()
        backbone = next(p for p in strategy.plugins if isinstance(p, Recorder)).backbone
        passes, flops = counted_image(strategy, backbone)
        for key, value in (
            ("train_s", self._trained),
            ("eval_s", evaluated),
            ("checkpoint_s", None),
            ("checkpoint_bytes", None),
            ("peak_rss_bytes", peak),
            ("stored_params", stored_params(strategy, backbone)),
            ("passes_per_image", passes),
            ("gflops_per_image", flops / 1e9),
        ):
            self.rows[key].append(value)
        self._trained = 0.0  # a joint method trains once, then evaluates T times
        self._ended = time.perf_counter()
        done = len(self.rows["train_s"])
        if done < self.tasks and self._ended - self.start > self.budget_s:
            raise OverBudget(done)


def toy_settings(method: str, tasks: int) -> dict:
    """The run's settings: ``tasks`` classes (one per task) and every epoch count 1."""
    from cl_bench.cards.catalogue import load_method

    params = load_method(method).params
    ones = {f"{method}.{k}": 1 for k in EPOCH_KEYS if k in params}
    return {"scenario.dataset_args": {"n_classes": tasks}, **ones}


def budgets(text: str, lengths: list[int]) -> dict[int, float]:
    """``--budget``: seconds for every length (``60``) or per length (``10:60,300:180``;
    :data:`BUDGET_S` for a length it does not name)."""
    if ":" not in text:
        return dict.fromkeys(lengths, float(text))
    named = {int(t): float(s) for t, s in (item.split(":") for item in text.split(","))}
    return {t: named.get(t, BUDGET_S) for t in lengths}


def one(method: str, tasks: int, budget_s: float) -> dict:
    """One run of ``method`` on ``tasks`` tasks, probed (this process)."""
    import cl_bench
    from cl_bench.api import UserError

    row = {"method": method, "tasks": tasks, "budget_s": budget_s, "status": "done"}
    row["stopped_at_task"] = None
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        probe = Probe(tasks, budget_s, Path(out))
        try:
            cl_bench.run(
                [method],
                scenario=SCENARIO,
                seeds=[SEED],
                out=out,
                settings=toy_settings(method, tasks),
                plugins=[probe],
                echo=None,
                **TOY,
            )
        except OverBudget as e:
            row.update(status="stopped", stopped_at_task=e.done)
        except UserError as e:
            row.update(status="refused", reason=e.paragraph())
    row["setup_s"] = (probe.start or time.perf_counter()) - t0
    row["rss_start_bytes"] = probe.rss_start
    row["per_task"] = probe.rows
    return row


def in_process(
    method: str, lengths: list[int], budget: dict[int, float], cache: Path
) -> list[dict]:
    """:func:`one` for each of ``lengths`` in one process of its own (its imports, its own
    resident set), killed :data:`GRACE_S` seconds per run past its budgets; a run it did
    not finish is recorded as killed or failed."""
    args = [sys.executable, "-m", "bench.cost_vs_tasks", "--one", method]
    spent = ",".join(f"{t}:{budget[t]}" for t in lengths)
    args += ["--lengths", ",".join(map(str, lengths)), "--budget", spent]
    limit = sum(budget[t] + GRACE_S for t in lengths)
    try:
        done = subprocess.run(
            args,
            capture_output=True,
            text=True,
            env={**os.environ, "CL_BENCH_CACHE": str(cache)},
            timeout=limit,
            cwd=Path(__file__).resolve().parents[1],
        )
        stdout, why = done.stdout, f"exit {done.returncode}"
        tail = (done.stderr or "").strip().splitlines()[-3:]
    except subprocess.TimeoutExpired as e:
        stdout, tail = e.stdout or "", []
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
        why = f"killed {limit:.0f} s after its start: a task did not end in time"
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]
    for tasks in lengths[len(rows) :]:
        reason = why if not tail else f"{why}: " + " | ".join(tail)
        rows.append({"method": method, "tasks": tasks, "status": "failed", "reason": reason})
        why, tail = "not run: the process ended before", []
    return rows


def main(methods: list[str], lengths: list[int], budget: dict[int, float]) -> dict:
    from bench.measurements import head_commit

    runs = []
    load, commit = os.getloadavg(), head_commit()
    with tempfile.TemporaryDirectory() as cache:
        for method in methods:
            for row in in_process(method, lengths, budget, Path(cache)):
                short = {k: v for k, v in row.items() if k != "per_task"}
                print(json.dumps(short), flush=True)
                runs.append(row)
    return {
        "toy": {
            "scenario": SCENARIO,
            "scenario_note": "one class per task; 4 training and 2 test images per class, 16 px",
            **TOY,
            "seed": SEED,
            "epochs": "every epoch count of a card (epochs, init_epochs, fit_epochs, "
            "ca_epochs) set to 1; every other setting the card's default",
            "budget_s": {str(t): s for t, s in budget.items()},
            "budget_note": "seconds from a run's first task, per stream length; a run past "
            "it stops after the task it is on (status stopped, stopped_at_task)",
            "lengths": lengths,
            "methods": methods,
            "process": "one process per method, its lengths in turn",
        },
        "commit_at_start": commit,
        "load_average": {"start": load, "end": os.getloadavg()},
        "runs": runs,
    }


def last(row: dict, key: str):
    values = row.get("per_task", {}).get(key) or [None]
    return values[-1]


def headline(out: dict) -> list[tuple[str, str]]:
    """Per method, its longest stream: how far it got and its costs at the last task."""
    rows = []
    for method in out["toy"]["methods"]:
        runs = [r for r in out["runs"] if r["method"] == method]
        r = max(runs, key=lambda r: (len(r.get("per_task", {}).get("train_s", [])), r["tasks"]))
        done = len(r.get("per_task", {}).get("train_s", []))
        if not done:
            rows.append((method, f"T = {r['tasks']}: {r['status']}"))
            continue
        passes = last(r, "passes_per_image")
        reached = f"{done} of {r['tasks']} tasks" + (
            f" ({r['status']})" if r["status"] != "done" else ""
        )
        rows.append(
            (
                method,
                f"{reached}; at task {done}: {last(r, 'train_s'):.2f} s training, "
                f"{last(r, 'stored_params'):,} stored parameters, "
                f"{passes} backbone pass{'es' * (passes != 1)} and "
                f"{last(r, 'gflops_per_image'):.3f} GFLOPs per test image",
            )
        )
    return rows


def record(out: dict, note: str = "", results: Path | None = None) -> Path:
    from bench.measurements import RESULTS, command_line, write

    return write(
        "cost-vs-tasks",
        headline(out),
        out,
        "fp32",
        command_line(["-m", "bench.cost_vs_tasks", *sys.argv[1:]]),
        note=note,
        results=results or RESULTS,
    )


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    from cl_bench.cards.catalogue import method_names

    parser = argparse.ArgumentParser(prog="python -m bench.cost_vs_tasks")
    parser.add_argument("--methods", default=",".join(method_names()))
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--budget", default=BUDGETS, help="S, or T:S,... per length")
    parser.add_argument("--note", default="", help="meta.note of the record: one sentence")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--results", type=Path, help="record there instead of bench/results")
    parser.add_argument("--one", metavar="METHOD", help="run one method here, print its rows")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = arguments()
    lengths = [int(t) for t in args.lengths.split(",")]
    budget = budgets(args.budget, lengths)
    if args.one:
        for tasks in lengths:
            print(json.dumps(one(args.one, tasks, budget[tasks])), flush=True)
    else:
        found = main(args.methods.split(","), lengths, budget)
        if not args.no_record:
            print(f"recorded in {record(found, args.note, args.results)}")
