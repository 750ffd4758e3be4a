"""``cl-bench run``: methods x seeds on one or more scenarios, in this process or as a grid."""

from __future__ import annotations

from pathlib import Path

import typer

from cl_bench import api
from cl_bench.commands import config_options as C
from cl_bench.commands import grid_options as G
from cl_bench.commands import run_options as R
from cl_bench.commands import tuned_options as T
from cl_bench.commands.shared import csv, user_errors, with_cards


@user_errors
@with_cards
def run(
    ctx: typer.Context,
    methods: R.Methods = None,
    scenario: R.Scenario = "fmnist",
    seeds: R.Seeds = "1993",
    protocol: R.Protocol = "fair",
    sets: R.Sets = None,
    validation: R.Validation = 0.0,
    tuned: T.Tuned = False,
    tuned_on: T.TunedOn = None,
    tuned_from: T.TunedFrom = api.TUNE_OUT,
    config: C.Config = None,
    suite: C.Suite = None,
    dry_run: R.DryRun = False,
    cards: R.Cards = None,
    backbone: R.Backbone = None,
    weights: R.Weights = None,
    image_size: R.ImageSize = None,
    data_root: R.DataRoot = None,
    download: R.Download = False,
    device: R.Device = "auto",
    precision: R.Precision = "auto",
    deterministic: R.Deterministic = "strict",
    out: R.Out = Path("results"),
    progress: R.Progress = True,
    log: R.Log = None,
    launcher: G.Launcher = None,
    jobs: G.Jobs = None,
    slurm_partition: G.SlurmPartition = None,
    slurm_gpus: G.SlurmGpus = None,
    slurm_gres: G.SlurmGres = None,
    slurm_gpu_arch: G.SlurmGpuArch = None,
    slurm_cpus: G.SlurmCpus = None,
    slurm_time: G.SlurmTime = None,
    slurm_array_parallelism: G.SlurmArrayParallelism = None,
    wait: G.Wait = True,
    slurm_requeue: G.SlurmRequeue = False,
) -> None:
    """Run methods x seeds on one or more scenarios and print average and last accuracy.

    Every method learns the same class-incremental stream on the same backbone, class order
    and seeds. Finished runs are skipped, so an interrupted grid resumes by running the same
    command again; a run that another process is computing is skipped too. --launcher local
    runs the grid in parallel worker processes, --launcher slurm as a SLURM job array, and
    --dry-run prints the plan without loading weights or training. A --set with
    comma-separated values sweeps: one run per combination of the values, each with the
    identity a single --set gives. --config reads the options from a YAML file; --suite
    runs a suite's entries.

    Examples:
      cl-bench run --methods tosca,l2p --scenario imagenet-a --data-root ~/data
      cl-bench run --methods tosca,l2p,simplecil --seeds 1993,1994,1995 \\
          --scenario imagenet-a --data-root ~/data --launcher local --jobs 2
      cl-bench run --methods tosca --scenario synthetic --set tosca.lr=0.01,0.05
      cl-bench run --config run.yaml --seeds 1993
      cl-bench run --methods tosca --scenario synthetic --tuned --seeds 1993,1994
      cl-bench run --suite ci --dry-run
      cl-bench run --methods tosca,l2p --scenarios cifar100,imagenet-r \\
          --seeds 1993,1994 --data-root ~/data \\
          --launcher slurm --slurm-partition gpu --slurm-gpus 1 --slurm-time 180
    """
    given = [
        n for n in ctx.params if getattr(ctx.get_parameter_source(n), "name", "") == "COMMANDLINE"
    ]
    o = dict(ctx.params)
    if suite is not None:
        api.refuse_fixed(suite, [*given, *(["tuned"] if tuned or tuned_on else [])])
        o["out"] = out if "out" in given else api.suite_out(suite)
    if config is not None:
        from_file = api.config_options(config)
        typer.echo(f"config: {config} (sha256 {api.config_digest(config)})")
        o = api.merge_options({n: o[n] for n in given}, o, from_file)
    opts = api.launch_options(
        o["launcher"],
        **{n: o[n] for n in ("jobs", "wait") if n in o},
        **{n: v for n, v in o.items() if n.startswith("slurm_")},
        submitting=not o["dry_run"],
    )
    if suite is not None:
        keep = ("device", "deterministic", "data_root", "download", "progress")
        reqs = api.plan_suite(suite, out=o["out"], **{n: o[n] for n in keep})
    else:
        reqs = api.plan(
            o["methods"],
            o["scenario"],
            seed_list(o["seeds"]),
            sets=o["sets"] or [],
            log=csv(o.get("log")),
            config_file=config,
            **{n: o[n] for n in C.PLANNED},
        )
        if tuned or tuned_on:
            for line in api.apply_tuned(reqs, tuned_from, tuned_on):
                typer.echo(line)
    if o["dry_run"]:
        typer.echo("\n".join(api.dry_run(reqs, opts)))
    elif o["launcher"] is None:
        in_process(reqs)
    else:
        on_workers(reqs, opts, o["out"])


def seed_list(seeds: str | list[int]) -> list[int]:
    """``--seeds 1993,1994`` (or a config file's list) -> ``[1993, 1994]``."""
    if isinstance(seeds, list):
        return seeds
    try:
        return [int(s) for s in csv(seeds)]
    except ValueError:
        raise api.UserError(
            f'--seeds "{seeds}" must be comma-separated integers, e.g. 1993,1994,1995.'
        ) from None


def in_process(reqs: list) -> None:
    """Run the requests one after another here; the summary table, exit 1 if some failed."""
    try:
        done = api.run_requests(reqs, echo=typer.echo)
    except api.RunsFailed as e:
        typer.echo("\n" + api.summary_table(e.results))
        typer.echo(str(e), err=True)
        raise typer.Exit(1) from None
    typer.echo("\n" + api.summary_table(done))


def on_workers(reqs: list, opts, out: Path) -> None:
    """Run the requests' grid with the launcher; the summary, exit 1 if runs did not finish."""
    grid = api.launch(reqs, opts, echo=typer.echo)
    if grid.records:
        typer.echo("\n" + api.summary_table(grid.results))
    typer.echo(grid.counts())
    if grid.unfinished:
        typer.echo(
            f"{grid.unfinished} run(s) did not finish: see `cl-bench status --results {out}`; "
            "the same command runs them again.",
            err=True,
        )
        raise typer.Exit(1)
