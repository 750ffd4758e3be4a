"""Running a method for its counts without its arithmetic (``cl-bench account``).

Parameter counts depend on shapes only, and the FLOP counter
(``torch.utils.flop_counter``) counts an operation from the shapes of its inputs:
the operations it has a formula for (matrix products, convolutions, attention, and
their backward passes) are also the ones that cost the time. Inside
:func:`shapes_only` those operations, and the linear-algebra factorisations and
solves (Cholesky, ``solve``, ``eigh``, QR, SVD, ...: never counted, but a ridge
solve of RanPAC's 10,000 x 10,000 Gram matrix is most of its time), return zeros of
the shape, strides and dtype the operation would return, worked out on the ``meta``
device once per distinct input signature. A FLOP counter entered inside the block
still sees every such call with its real shapes, so its counts are those of the
real arithmetic. Every other operation runs for real on real tensors (on values
that are now zeros where a skipped product stood), so indexing by labels, the
classes of a task and any branch a method takes on a tensor still work.

What changes is values only: a branch a method takes on a computed value
(a routing choice, an early stop) follows the values of the skipped arithmetic,
which are zeros; the counts of a method whose FLOPs depend on such a value are
those of the path its zero-valued run takes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils.flop_counter import flop_registry

import cl_bench.accounting.count  # noqa: F401 -- registers the CPU attention formula

aten = torch.ops.aten

LINEAR_ALGEBRA_OPS = (
    "linalg_cholesky_ex",
    "cholesky_solve",
    "_cholesky_solve_helper",
    "cholesky_inverse",
    "_linalg_solve_ex",
    "linalg_solve_triangular",
    "triangular_solve",
    "linalg_inv_ex",
    "_linalg_eigh",
    "linalg_eig",
    "linalg_qr",
    "_linalg_svd",
    "linalg_lstsq",
    "linalg_lu_factor_ex",
    "linalg_lu_solve",
    "_linalg_det",
    "_linalg_slogdet",
    "linalg_householder_product",
    "geqrf",
)
LINEAR_ALGEBRA = {getattr(aten, n) for n in LINEAR_ALGEBRA_OPS if hasattr(aten, n)}


def skipped(func) -> bool:
    """Whether ``func`` (an aten overload) is answered with zeros in :func:`shapes_only`."""
    packet = func.overloadpacket
    return packet in flop_registry or packet in LINEAR_ALGEBRA


def _signature(value):
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), value.stride(), value.dtype, value.device.type)
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _signature(v)) for k, v in value.items()))
    return value


class _Zeros(NamedTuple):
    """An output of a skipped operation: made as zeros of this layout."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


def _on_meta(value):
    return value.to("meta") if isinstance(value, torch.Tensor) else value


class ShapesOnly(TorchDispatchMode):
    """The dispatch mode of :func:`shapes_only` (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._outputs: dict = {}

    def _layout(self, func, args, kwargs):
        """The outputs' (shape, stride, dtype) as a pytree, once per input signature."""
        key = (func, _signature(args), _signature(kwargs))
        try:
            hit = self._outputs.get(key)
        except TypeError:  # an argument that cannot be a key
            hit, key = None, None
        if hit is None:
            out = func(*tree_map(_on_meta, args), **tree_map(_on_meta, kwargs))
            leaves, spec = tree_flatten(out)
            hit = (
                [
                    _Zeros(tuple(t.shape), t.stride(), t.dtype)
                    if isinstance(t, torch.Tensor)
                    else t
                    for t in leaves
                ],
                spec,
            )
            if key is not None:
                self._outputs[key] = hit
        return hit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not skipped(func):
            # an op that autograd did not decompose (inference mode skips it): its parts
            # come back here, so that a product inside it is skipped too
            with self:
                parts = func.decompose(*args, **kwargs)
            if parts is not NotImplemented:
                return parts
            return func(*args, **kwargs)
        device = next(
            (t.device for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)),
            torch.device("cpu"),
        )
        leaves, spec = self._layout(func, args, kwargs)
        made = [
            torch.empty_strided(leaf.shape, leaf.stride, dtype=leaf.dtype, device=device).zero_()
            if isinstance(leaf, _Zeros)
            else leaf
            for leaf in leaves
        ]
        return tree_unflatten(made, spec)


@contextlib.contextmanager
def shapes_only() -> Iterator[ShapesOnly]:
    """Within the block, matrix products, convolutions, attention and linear algebra
    return zeros of their real shapes (module docstring)."""
    with ShapesOnly() as mode:
        yield mode
