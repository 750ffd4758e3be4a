"""What a method's :meth:`~cl_bench.contract.spec.Method.memory` hook returns: its
dominant allocations (:class:`Allocation`) under a run's :class:`Workload`; the
estimate that adds what every run allocates, and checks each budget (the GPU's, the
RAM's), is :mod:`cl_bench.engine.memory`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLOAT = 4  # bytes of a float32
HALF = 2  # bytes of a bfloat16 or float16


@dataclass(frozen=True)
class Allocation:
    """One dominant allocation: what it is, its bytes, and the setting that scales it
    (as the user changes it: ``--image-size``; a method's hook names its own key,
    ``M``, which the estimate prefixes with the card's name: ``ranpac.M``).

    ``host``: it lives in RAM whatever device the run computes on (cached features,
    their augmented views); every other allocation lives where the run computes, on
    the GPU when there is one. ``backward``: held only between a training batch's
    forward and backward passes (what autograd keeps, :func:`backward_pass`); the
    estimate weighs it, with that batch's images, against the largest forward-only
    batch instead of adding both, since the two are never held at once. ``per_task``:
    it grows with the stream's task count (a module, copy or statistic kept per task);
    the estimate sets it, by asking the hook again at twice the tasks, and a refusal
    then names the task count beside the setting."""

    what: str
    nbytes: int
    setting: str
    host: bool = False
    backward: bool = False
    per_task: bool = False


@dataclass(frozen=True)
class Workload:
    """What a run's allocations scale with, known before anything loads: the
    scenario's classes, tasks and images (0: unknown) and the backbone's feature width,
    ViT blocks (0 on a CNN) and input size; for a ViT also the tokens a block sees
    (patches and [CLS]), its MLP's hidden width and its parameter count; and the bytes
    an activation takes at least under the run's precision (4 in fp32, 2 where bf16 or
    fp16 autocast computes it)."""

    n_classes: int
    n_tasks: int
    train_images: int
    test_images: int
    dim: int
    blocks: int
    image_size: int
    tokens: int = 0
    hidden: int = 0
    parameters: int = 0
    activation_bytes: int = FLOAT


def capped(batch: int, images: int) -> int:
    """A batch holds at most the images it is drawn from (0 images: not known)."""
    return min(batch, images) if images else batch


def adapter_sets(work: Workload, ffn: int, count: int, setting: str) -> Allocation:
    """``count`` sets of AdaptFormer adapters of width ``ffn``, one per ViT block
    (down d x ffn, up ffn x d, their biases), for the method hooks that keep them."""
    per_set = work.blocks * (2 * work.dim * ffn + ffn + work.dim) * FLOAT
    return Allocation(f"{count} adapter set(s) of width {ffn}", count * per_set, setting)


def saved_per_token(work: Workload, trains_blocks: bool) -> int:
    """Elements autograd certainly keeps, per token, in one pre-norm timm ViT block
    (``x + attn(norm1(x))``, then ``+ mlp(norm2(x))``) that gradients flow through:
    norm1's input (d), the qkv output, which attention keeps as q, k and v (3 d),
    attention's output (d), norm2's input (d) and the GELU's input (the MLP hidden
    width h): 6 d + h, 10 d at h = 4 d. A block whose weights train also keeps the
    inputs of the linear layers for their weight gradients: norm1's and norm2's
    outputs (2 d) and the GELU's output (h): 8 d + 2 h, 16 d at h = 4 d (the
    projection's input may share attention's output, so it is not counted again).

    Only what every attention kernel keeps is counted: the fused kernels keep no
    heads x tokens^2 probabilities (the explicit softmax does), nor are the layer-norm
    statistics, the attention's log-sum-exp, adapter internals or dropout masks
    counted, so the number is a lower bound of what a training step holds."""
    if trains_blocks:
        return 8 * work.dim + 2 * work.hidden
    return 6 * work.dim + work.hidden


def backward_pass(
    work: Workload,
    params: dict[str, Any],
    first: int,
    extra_tokens: int = 0,
    trains_blocks: bool = False,
    read_rows: int | None = None,
) -> Allocation:
    """What autograd keeps for the backward pass of one training batch
    (``params["batch_size"]``) through the ViT: :func:`saved_per_token` for every
    token of every block from ``first`` on (the first block whose input carries
    gradients: 0 for prompts inserted as tokens or a trained backbone; the block
    after the first prefix or adapter, whose own input carries none), except the
    first ``checkpoint_blocks``, which are recomputed in the backward pass instead.
    ``extra_tokens``: the tokens a method adds to the sequence (L2P's prompts).
    ``read_rows``: the last block runs on those rows only (``PromptedViT``'s
    ``lean_tail``) and keeps norm1's input and the qkv output for every token (4 d)
    but the rest (2 d + h) for those rows. Each element at
    :attr:`Workload.activation_bytes`. 0 on a CNN (no blocks counted)."""
    batch = capped(params["batch_size"], work.train_images // work.n_tasks)
    kept = max(0, work.blocks - max(first, params.get("checkpoint_blocks", 0)))
    tokens = work.tokens + extra_tokens
    per_token = saved_per_token(work, trains_blocks)
    elements = tokens * per_token * kept
    if read_rows is not None and kept and not trains_blocks:
        elements -= (tokens - read_rows) * (per_token - 4 * work.dim)
    nbytes = batch * elements * work.activation_bytes
    return Allocation(
        f"what its backward pass keeps ({kept} ViT blocks x {tokens} tokens)",
        nbytes,
        "batch_size",
        backward=True,
    )


def optimizer_moments(params: dict[str, Any]) -> int:
    """Tensors the optimizer keeps per trained parameter, as
    :func:`cl_bench.contract.optimizer.make_optimizer` builds it: Adam's and AdamW's two
    moments, SGD's momentum buffer (none at momentum 0). Gradients are not counted
    beside them: Avalanche zeroes them to None before every forward pass, so they are
    not held while a batch's activations are."""
    if params["optimizer"] in ("adam", "adamw"):
        return 2
    return 1 if params.get("momentum", 0.9) else 0


def trained_copy_state(work: Workload, params: dict[str, Any], setting: str) -> Allocation:
    """The optimizer state of a trained copy of the whole backbone (fp32)."""
    moments = optimizer_moments(params)
    return Allocation(
        f"the trained backbone's optimizer state ({moments} per weight)",
        moments * work.parameters * FLOAT,
        setting,
    )
