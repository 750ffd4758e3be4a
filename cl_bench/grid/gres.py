"""``--slurm-gres`` as the plan reads it: the GPU type a job asks for and how many.

SLURM's form is ``gpu[:type][:count]``, beside other resources a site may require
(``gpu:a100:1,lscratch:200``), which pass to sbatch as given. A count that is not a
whole number of at least 1 is refused here: sbatch may take ``gpu:a100:0`` as a job
without a GPU, which the plan would have counted as a CUDA run.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from cl_bench.errors import UserError

COUNT = re.compile(r"[+-]?[0-9]+")  # what reads as a count rather than a type name
FORM = (
    "give gpu:<type>:1 (e.g. gpu:a100:1), gpu:1 or gpu:<type>, other resources after "
    "a comma (gpu:a100:1,lscratch:200)"
)


class Gres(NamedTuple):
    """The GPU part of a gres: its type (None: any GPU) and its count."""

    type: str | None
    count: int


def parse_gres(text: str) -> Gres:
    """The GPU type and count of ``text``, or a UserError naming the form."""
    items = [item.split(":") for item in text.split(",")]
    gpus = [fields for fields in items if fields[0] == "gpu"]
    if len(gpus) != 1 or any("" in fields for fields in items):
        why = (
            "asks for no GPU"
            if not gpus
            else "asks for GPUs more than once"
            if len(gpus) > 1
            else "has an empty field"
        )
        raise UserError(f"--slurm-gres {text} {why}: {FORM}.")
    fields = gpus[0][1:]
    if len(fields) > 2:
        raise UserError(f"--slurm-gres {text} has more fields than gpu:<type>:<count>: {FORM}.")
    if len(fields) == 2:
        kind, count = fields
    elif fields and COUNT.fullmatch(fields[0]):
        kind, count = None, fields[0]
    else:
        kind, count = (fields[0] if fields else None), "1"
    if not COUNT.fullmatch(count) or int(count) < 1:
        raise UserError(
            f"--slurm-gres {text} asks for {count} GPUs: the count, the last field, "
            "must be a whole number of at least 1, and a run is one process on one "
            "GPU, so ask for 1 (e.g. gpu:a100:1)."
        )
    return Gres(kind, int(count))
