"""What a method card repeats of its strategy's contract: ``inputs:`` and ``backbones:``
are for the reader, and the class's declaration is what runs, so a card that says
otherwise is refused when it loads instead of describing another method."""

from __future__ import annotations

from cl_bench.contract import spec_of
from cl_bench.errors import UserError


def declared(cls: type) -> dict[str, str]:
    """The card keys that repeat the contract of ``cls``, with the declared values."""
    return {"inputs": spec_of(cls).inputs.value, "backbones": cls.backbones}


def check_declared(path, raw: dict, cls: type) -> None:
    """Refuse a card (``raw``, read from ``path``) whose ``inputs:`` or ``backbones:``
    differs from what its strategy ``cls`` declares."""
    for key, value in declared(cls).items():
        if key in raw and raw[key] != value:
            raise UserError(
                f"{path}: `{key}: {raw[key]}`, but its strategy "
                f"{raw['strategy']} declares {key} {value}. Write `{key}: {value}` "
                "in the card, or drop the line: the strategy's declaration is "
                "what runs."
            )
