"""A run that runs out of memory fails alone, says what to lower, and gives its memory back.

Without this, a CUDA out-of-memory error is a RuntimeError like any bug: the grid stops
at it, the runs after it never run, and the memory the failed run held (its model,
optimizer state and activations, kept alive by the exception's traceback) stays
allocated for the next run of the process. :func:`out_of_memory_named` turns it into a
:class:`OutOfMemory` (a :class:`UserError`: the runner records it in the run's
``.failed`` file and goes on with the next run), naming the method's batch-size
settings with their values, after clearing the frames that held the run's tensors and
emptying CUDA's cache. A kernel that strict determinism forbids is named the same way,
with the setting that allows it.
"""

from __future__ import annotations

import gc
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from cl_bench.cards.card import Card
from cl_bench.errors import UserError

CPU_OUT_OF_MEMORY = ("DefaultCPUAllocator: can't allocate memory", "not enough memory")
NOT_DETERMINISTIC = "does not have a deterministic implementation"


class OutOfMemory(UserError):
    """The run needed more memory than its device had; the message names what to lower."""


def release_memory(device: torch.device) -> None:
    """Collect what is no longer referenced and return CUDA's cached blocks, so that the
    next run of the process starts with the memory the failed one held."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def batch_settings(card: Card) -> list[str]:
    """The card's batch-size settings with their values: what bounds activations."""
    return [
        f"{card.name}.{key} (now {value})"
        for key, value in sorted(card.params.items())
        if key.endswith("batch_size") and isinstance(value, int) and value > 0
    ]


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and any(s in str(error) for s in CPU_OUT_OF_MEMORY)


def oom_paragraph(card: Card, device: torch.device, error: BaseException) -> str:
    first = " ".join(str(error).split(". ")[0].split())[:200]
    where = "GPU memory" if device.type == "cuda" else "memory"
    lower = batch_settings(card)
    what = (
        f"lower {' or '.join(lower)} with --set {card.name}.<key>=<smaller>"
        if lower
        else "lower --image-size"
    )
    return (
        f"{card.name} ran out of {where} on {device} ({first}). To fit, {what}; or use "
        "--precision bf16 (fp16 on a GPU without bf16) for half-size activations, or a "
        "device with more memory. The other runs go on; this one is recorded in its "
        ".failed file, and the same command runs it again."
    )


@contextmanager
def out_of_memory_named(card: Card, device: torch.device) -> Iterator[None]:
    """Run a method's drive; an out-of-memory error or a kernel strict determinism
    forbids becomes one UserError paragraph, with the failed run's memory released."""
    try:
        yield
    except RuntimeError as e:
        if is_out_of_memory(e):
            message = oom_paragraph(card, device, e)
            kind: type[UserError] = OutOfMemory
        elif NOT_DETERMINISTIC in str(e):
            op = " ".join(str(e).split())[:200]
            message = (
                f"{card.name} uses a kernel with no deterministic version on "
                f"{device} ({op}). Run it with --deterministic fast (recorded in the "
                "result; the same seed may then differ in the last digits), or on "
                "the CPU."
            )
            kind = UserError
        else:
            raise
        traceback.clear_frames(e.__traceback__)
        del e
        release_memory(device)
        raise kind(message) from None
