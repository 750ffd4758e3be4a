"""Figure account-scaling: what `cl-bench account` costs per method as the stream grows:
time, CPU time and peak memory of counting one method on ViT-B/16 (random weights) at
10 tasks of 200 classes (20 a task) and 300 tasks of 300 classes (1 a task), each in
its own process; with ``--before COMMIT``, the same counts by that commit's code
(its tree extracted with ``git archive`` to a scratch folder and imported first), in
the same invocation and alternating with ours, on the streams of at most
``--before-tasks`` tasks (a full-size placeholder run of 300 tasks takes hours).

    python -m bench.account_scaling                      # every built-in method
    python -m bench.account_scaling --methods tosca,mos,min --before 98bad5b
    python -m bench.account_scaling --before 98bad5b --before-methods tosca,mos

Each child imports cl-bench (timed apart), counts the method through
``cl_bench.api.account`` on one thread (the machines are shared: one thread keeps CPU
seconds free of threads spinning for a busy core) and prints its seconds, its own CPU seconds and
what it counted (the inference GFLOPs and stored parameters: before and after must
agree); the parent takes the child's wall time and peak resident set (``wait4``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import run_child

REPO = Path(__file__).resolve().parent.parent
BACKBONE = "vit_base_patch16_224"
STREAMS = ((10, 200), (300, 300))  # (tasks, classes)

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
import torch
import cl_bench.engine.account
from cl_bench.api import account
torch.set_num_threads(1)
imported = time.perf_counter() - t0
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0, t1 = cpu(), time.perf_counter()
row = account([{method!r}], tasks={tasks}, classes={classes}, backbone={backbone!r})[0]
print(json.dumps({{
    "import_s": round(imported, 2),
    "account_s": round(time.perf_counter() - t1, 2),
    "account_cpu_s": round(cpu() - c0, 2),
    "tasks_run": row.get("tasks_run", {tasks}),
    "inference_gflops_per_image": row["inference_gflops_per_image"],
    "stored_at_end": row["stored_at_end"],
    "train_gflops_per_sample": row["train_gflops_per_sample"],
}}))
"""


def count(method: str, tasks: int, classes: int, tree: Path | None) -> dict:
    """One child's measurement of ``method`` (``tree``: the code measured, else ours)."""
    code = CHILD.format(method=method, backbone=BACKBONE, tasks=tasks, classes=classes)
    cmd = [sys.executable, "-c", code]
    if tree is not None:  # its tree first on the path (env execs the interpreter in place)
        path = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))
        cmd = ["env", f"PYTHONPATH={path}", *cmd]
    what = {
        "method": method,
        "tasks": tasks,
        "classes": classes,
        "code": "before" if tree is not None else "ours",
    }
    try:
        done = run_child(cmd, f"account {method} {tasks}", cwd=str(tree or REPO))
    except RuntimeError as e:  # a setting the stream does not fit (CODA-Prompt's pool)
        return {**what, "refused": str(e).strip().splitlines()[-1]}
    return {
        **what,
        "wall_s": round(done.wall_s, 2),
        "peak_rss_gb": round(done.peak_rss_gb, 3),
        **done.result,
    }


def built_in_methods() -> list[str]:
    return sorted(p.stem for p in (REPO / "methods").glob("*.yaml"))


def main(
    methods: list[str],
    before: str | None = None,
    before_tasks: int = 10,
    before_methods: list[str] | None = None,
) -> dict:
    """``methods`` counted by ours on both streams; by ``before`` (a commit), those of
    ``before_methods`` (default: all) on the streams of at most ``before_tasks`` tasks."""
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        tree = None
        if before:
            tree = Path(scratch)
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", before], capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", scratch], input=archive.stdout, check=True)
        for tasks, classes in STREAMS:
            for method in methods:
                wanted = before_methods is None or method in before_methods
                if tree is not None and tasks <= before_tasks and wanted:
                    runs.append(count(method, tasks, classes, tree))
                runs.append(count(method, tasks, classes, None))
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    return {"backbone": BACKBONE, "before": before, "runs": runs}


def headline(result: dict) -> list[tuple[str, str]]:
    """Per method and stream: ours (and before, where measured)."""
    rows = []
    for run in result["runs"]:
        label = f"{run['method']}, {run['tasks']} tasks of {run['classes']} classes"
        label += ", before" if run["code"] == "before" else ""
        if "refused" in run:
            rows.append((label, f"refused: {run['refused']}"))
            continue
        rows.append(
            (
                label,
                f"{run['wall_s']:.1f} s wall, {run['account_cpu_s']:.1f} s CPU counting, "
                f"{run['peak_rss_gb']:.2f} GB peak, {run['tasks_run']} tasks run",
            )
        )
    return rows


if __name__ == "__main__":
    from bench.measurements import command_line, write

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default=",".join(built_in_methods()))
    parser.add_argument("--before", default=None, help="a commit to measure beside ours")
    parser.add_argument("--before-tasks", type=int, default=10)
    parser.add_argument("--before-methods", default=None, help="default: every one of --methods")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    result = main(
        args.methods.split(","),
        args.before,
        args.before_tasks,
        args.before_methods.split(",") if args.before_methods else None,
    )
    print(json.dumps(result))
    if not args.no_record:
        path = write(
            "account-scaling",
            headline(result),
            result,
            "fp32",
            command_line(["-m", "bench.account_scaling", *sys.argv[1:]]),
        )
        print(f"(account-scaling) recorded in {path.relative_to(REPO)}", file=sys.stderr)
