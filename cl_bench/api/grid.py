"""Grids: every method x scenario x seed of a grid as a job of its own, in worker processes
on this machine or as a SLURM job array (``cl-bench run --launcher``), and the plan of a
grid printed without running it (``cl-bench run --dry-run``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cl_bench import arguments
from cl_bench.api.runs import plan, settings_as_sets
from cl_bench.errors import UserError, refuse_long_names

if TYPE_CHECKING:
    from cl_bench.engine.runner import RunRequest
    from cl_bench.grid.launch import GridResult
    from cl_bench.grid.options import LaunchOptions

__all__ = ["dry_run", "launch", "launch_options", "run_grid"]

Echo = Callable[[str], None]


@refuse_long_names
def launch_options(
    launcher: str | None = None,
    *,
    jobs: int | None = None,
    wait: bool = True,
    slurm_partition: str | None = None,
    slurm_gpus: int | None = None,
    slurm_gres: str | None = None,
    slurm_gpu_arch: str | None = None,
    slurm_cpus: int | None = None,
    slurm_time: int | None = None,
    slurm_array_parallelism: int | None = None,
    slurm_requeue: bool = False,
    submitting: bool = True,
) -> LaunchOptions:
    """The launcher and its settings, checked as ``cl-bench run`` checks them: ``launcher``
    None (one run after another in this process), "local" (``jobs`` worker processes) or
    "slurm" (a submitit job array; the ``slurm_*`` settings, ``wait``: follow the jobs to
    the end). ``submitting`` False (a dry run) needs no cluster."""
    from cl_bench.grid.options import LaunchOptions, check_options

    whole = [
        arguments.whole(name, value, f"{name}=2", optional=True)
        for name, value in (
            ("jobs", jobs),
            ("slurm_gpus", slurm_gpus),
            ("slurm_cpus", slurm_cpus),
            ("slurm_time", slurm_time),
            ("slurm_array_parallelism", slurm_array_parallelism),
        )
    ]
    opts = LaunchOptions(
        arguments.text("launcher", launcher, 'launcher="local"', optional=True),
        whole[0],
        arguments.text("slurm_partition", slurm_partition, 'slurm_partition="gpu"', optional=True),
        whole[1],
        whole[2],
        whole[3],
        whole[4],
        arguments.flag("wait", wait),
        slurm_requeue=arguments.flag("slurm_requeue", slurm_requeue),
        slurm_gres=arguments.text(
            "slurm_gres", slurm_gres, 'slurm_gres="gpu:a100:1"', optional=True
        ),
        slurm_gpu_arch=arguments.text(
            "slurm_gpu_arch", slurm_gpu_arch, 'slurm_gpu_arch="sm_80"', optional=True
        ),
    )
    check_options(opts, submitting=arguments.flag("submitting", submitting))
    return opts


@refuse_long_names
def dry_run(requests: list[RunRequest], options: LaunchOptions | None = None) -> list[str]:
    """The plan of the requests (:func:`cl_bench.api.plan`) as ``cl-bench run --dry-run``
    prints it: every run's settings, result path and state (done, stale, running, failed,
    pending), as ``options`` would run them; no weights are loaded, nothing is trained."""
    from cl_bench.grid.dry_run import dry_run as plan_lines
    from cl_bench.grid.options import LaunchOptions

    return plan_lines(requests, options or LaunchOptions())


@refuse_long_names
def launch(
    requests: list[RunRequest], options: LaunchOptions, echo: Echo | None = print
) -> GridResult:
    """Run the requests' grid with a launcher (:func:`launch_options`): plan every run,
    submit those neither finished nor running elsewhere, follow them to the end (unless
    SLURM with ``wait`` False) and read the results back. The :class:`GridResult` holds
    the finished runs (``results``) and those that failed, were interrupted or are left
    pending; the same call runs those again."""
    from cl_bench.grid.launch import launch as launch_grid

    if options.launcher is None:
        raise arguments.refuse(
            "options", options, "launch options with a launcher", 'launch_options("local", jobs=2)'
        )
    return launch_grid(requests, options, echo=arguments.callback("echo", echo) or (lambda _: None))


def refuse_unknown(caller: str, options: Mapping[str, Any], planner: Callable[..., Any]) -> None:
    """A keyword that neither the launcher nor ``planner`` takes (a misspelt one) is a
    UserError naming the nearest known name, not Python's TypeError."""
    import inspect

    from cl_bench.errors import suggest

    known = {
        *inspect.signature(planner).parameters,
        *inspect.signature(launch_options).parameters,
    } - {"methods", "scenario", "seeds", "sets", "launcher", "submitting"}
    for name in options:
        if name not in known:
            raise UserError(
                f"{caller}() got the unknown keyword {name!r}.{suggest(name, sorted(known))} "
                f"It takes: {', '.join(sorted(known))}."
            )


def run_grid(
    methods: str | Sequence[str] | None = None,
    scenario: str | Sequence[str] = "fmnist",
    seeds: int | Iterable[int] = (1993,),
    *,
    launcher: str = "local",
    jobs: int | None = None,
    settings: Mapping[str, object] | None = None,
    echo: Echo | None = print,
    **options: Any,
) -> GridResult:
    """Run methods x scenarios x seeds as a grid, as ``cl-bench run --launcher``: one job
    per run, ``launcher`` "local" (``jobs`` worker processes here; default one per CPU
    core, or per GPU) or "slurm" (``slurm_partition``, ``slurm_gpus``, ``slurm_gres``,
    ``slurm_gpu_arch``, ``slurm_cpus``, ``slurm_time``, ``slurm_array_parallelism``,
    ``slurm_requeue``, ``wait``, as :func:`launch_options` takes them). The other keyword
    arguments are :func:`cl_bench.run`'s (``out``, ``backbone``, ``device``, ``protocol``,
    ...). Results land where :func:`cl_bench.run` puts them, with the same identities."""
    grid_keys = {name for name in options if name == "wait" or name.startswith("slurm_")}
    refuse_unknown("run_grid", options, plan)
    opts = launch_options(
        arguments.text("launcher", launcher, 'launcher="local"'),
        jobs=jobs,
        **{name: options.pop(name) for name in grid_keys},
    )
    requests = plan(methods, scenario, seeds, sets=settings_as_sets(settings), **options)
    return launch(requests, opts, echo)
