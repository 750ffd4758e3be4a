"""The CLI in-process, the check of a refusal, and the argument lists tests share."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cl_bench.commands.cli import app

SYNTHETIC = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32"]
FAST = [*SYNTHETIC, "--set", "tosca.epochs=3"]

TREE = [
    "--scenario",
    "imagefolder",
    "--methods",
    "simplecil",
    "--image-size",
    "32",
    "--no-progress",
    "--set",
    "scenario.init_cls=1",
    "--set",
    "scenario.increment=1",
]

# the advice of a strategy that declares no method contract
ADVICE = (
    "declares no method contract: what it consumes, whether it trains the backbone and "
    "how it is driven. Either the class derives from cl_bench.contract.Method and "
    "declares it, e.g. spec = MethodSpec(inputs=Inputs.IMAGES, trains_backbone=False, "
    "schedule=Schedule.PER_TASK) (see cl_bench/contract/), or, for a plain Avalanche "
    "strategy, its method card declares it in a `contract:` block with inputs, "
    "trains_backbone, schedule and the model factory to build it with (see "
    "cl_bench/contract/plain.py)."
)


def invoke(*args: str):
    """Run the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(app, list(args))


def refused(result, needle: str, out: Path | None = None) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert needle in result.stderr, result.stderr
    if out is not None:
        assert not out.exists() or list(out.rglob("*")) == []


def status_of(out: Path) -> str:
    result = invoke("status", "--results", str(out))
    assert result.exit_code == 0, result.output
    return result.stdout
