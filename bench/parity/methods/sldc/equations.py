"""SLDC's post-task equations against the authors' own functions, on identical tensors:
the class statistics, the linear drift operator with its pull toward the identity and
the transport of every stored Gaussian (``SLDC_Drift_Compensator.compute_class_statistics``
and ``update_statistics_with_linear_transform``), the Cholesky factor the samples are
drawn with (``GaussianStatistics.L``), the symmetric cross-entropy and the distillation
terms (``models/sldc.py``), all of raoxuan98-hash/sldc_rebuttal at fe0f492, against
cl_bench/strategies/sldc.py. Not a parity row (no step check through training, no
paired seeds): the part of it that needs no patch of the authors' code.

    python -m bench.parity.methods.sldc.equations --reference DIR

DIR: a git checkout of raoxuan98-hash/sldc_rebuttal holding commit fe0f492; its
``models/`` at that commit are copied into a scratch folder outside the repository
and imported from there. Prints the largest absolute difference per quantity and exits
1 when one exceeds ``BOUND``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from cl_bench.strategies import sldc as ours
from cl_bench.strategies.blocks.gaussian_alignment import class_gaussians

COMMIT = "fe0f492fb45e26dbca4f26fff3cac0316768d368"
BOUND = 1e-4
BOUND_WHY = (
    "float32 round-off: the authors solve the ridge system in float32 and factor with "
    "their own column-wise Cholesky, cl-bench solves in float64 and factors with LAPACK"
)
COMPENSATOR_ARGS = {
    "use_linear_compensation": True,
    "use_weak_nonlinear_compensation": False,
    "use_mlp_compensation": False,
    "alpha_t": 1.0,
    "gamma_1": 1e-4,
    "gamma_2": 0.5,
    "use_auxiliary_data_enhancement": False,
    "auxiliary_data_size": 0,
}


def scratch_models(reference: Path, scratch: Path) -> Path:
    """``models/`` of ``reference`` at the pinned commit, extracted under ``scratch``."""
    archive = subprocess.run(
        ["git", "-C", str(reference), "archive", COMMIT, "models"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(scratch, filter="data")
    return scratch


def losses_of(models: Path) -> dict:
    """The loss functions of the authors' ``models/sldc.py`` (the part before its
    learner class, which imports the authors' data and network modules)."""
    source = (models / "sldc.py").read_text().split("class SubspaceLoRA")[0]
    kept = [
        line for line in source.splitlines() if not line.startswith(("from models", "from utils"))
    ]
    namespace: dict = {}
    exec(compile("\n".join(kept), str(models / "sldc.py"), "exec"), namespace)
    return namespace


def differences(root: Path, seed: int = 0, d: int = 32, n: int = 40) -> dict[str, float]:
    """Largest absolute difference per quantity on one draw of features."""
    sys.path.insert(0, str(root))
    from models import sldc_modules as reference

    g = torch.Generator().manual_seed(seed)
    before = torch.randn(n, d, generator=g)
    drift = torch.eye(d) + 0.1 * torch.randn(d, d, generator=g)
    after = before @ drift + 0.05
    labels = torch.arange(n) % 4
    compensator = reference.SLDC_Drift_Compensator(COMPENSATOR_ARGS)
    with contextlib.redirect_stdout(io.StringIO()):
        stats = compensator.compute_class_statistics(before, labels)
        moved = compensator.update_statistics_with_linear_transform(stats, before, after)
    empty = (torch.zeros(0, d), torch.zeros(0, d, d))
    means, covs = class_gaussians(before, labels, [0, 1, 2, 3], *empty, 4, jitter=0.0)
    a = ours.drift_operator(before, after, COMPENSATOR_ARGS["gamma_1"], COMPENSATOR_ARGS["alpha_t"])
    new_means, new_covs = ours.transport(means, covs, a)
    eye = ours.SAMPLING_JITTER * torch.eye(d)
    factors = torch.linalg.cholesky((new_covs + eye).double()).float()
    logits = torch.randn(8, 5, generator=g)
    targets = torch.randint(0, 5, (8,), generator=g)
    teacher, student = torch.randn(8, d, generator=g), torch.randn(8, d, generator=g)
    losses = losses_of(root / "models")
    distilled = losses["feature_distillation_loss"](teacher, student) + 0.1 * F.mse_loss(
        teacher.norm(dim=1), student.norm(dim=1)
    )

    def worst(pairs) -> float:
        return max(float((x - y).abs().max()) for x, y in pairs)

    return {
        "class mean": worst((stats[c].mean, means[c]) for c in range(4)),
        "class covariance": worst((stats[c].cov, covs[c]) for c in range(4)),
        "transported mean": worst((moved[c].mean, new_means[c]) for c in range(4)),
        "transported covariance": worst((moved[c].cov, new_covs[c]) for c in range(4)),
        "sampling factor": worst((moved[c].L, factors[c]) for c in range(4)),
        "symmetric cross-entropy": abs(
            float(losses["symmetric_cross_entropy_loss"](logits, targets))
            - float(ours.symmetric_cross_entropy(logits, targets))
        ),
        "distillation": abs(
            float(distilled) - float(ours.distillation(teacher, student, 1.0, 0.1))
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="sldc-reference-") as scratch:
        found = differences(scratch_models(args.reference, Path(scratch)))
    for name, value in found.items():
        print(f"{name:24s} {value:.2e}")
    print(f"bound {BOUND:g}: {BOUND_WHY}")
    return 0 if max(found.values()) <= BOUND else 1


if __name__ == "__main__":
    raise SystemExit(main())
