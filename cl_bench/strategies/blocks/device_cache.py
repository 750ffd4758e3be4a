"""Class masks and column indices on the device the forward runs on, made once per task.

The models keep their bookkeeping (which classes the current task trains, which were
seen, the task of every class row) in plain CPU tensors: they are saved and restored
with a checkpoint, wherever the run is resumed. A forward that copied one of them to
the GPU at every batch would wait for the GPU there (a host-to-device copy from
ordinary memory synchronises), and at batches of 16 to 48 those waits serialise the
Python and the GPU work. :class:`DeviceCache` builds each value the forward needs from
the bookkeeping, copies it to the device once, and hands out the same tensor until its
sources change.

A source is compared by identity when it is a tensor, by equality otherwise. The
bookkeeping tensors are replaced, never changed in place, when a task begins, a class
is unmasked or a checkpoint is restored, so a new value is always a new object.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _same(a: object, b: object) -> bool:
    return a is b if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) else a == b


class DeviceCache:
    """Named values on a device, each rebuilt only when its device or sources change.
    The entries hold their sources, so an identity is never that of a freed tensor."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[tuple, torch.Tensor]] = {}

    def get(
        self, name: str, device: torch.device, sources: tuple, make: Callable[[], torch.Tensor]
    ) -> torch.Tensor:
        """``make()`` on ``device``, made when ``name`` was last made on another device or
        from other ``sources``; otherwise the tensor made then."""
        key = (device, *sources)
        entry = self._entries.get(name)
        if (
            entry is None
            or len(entry[0]) != len(key)
            or not all(_same(a, b) for a, b in zip(entry[0], key, strict=True))
        ):
            entry = (key, make().to(device))
            self._entries[name] = entry
        return entry[1]
