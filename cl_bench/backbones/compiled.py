"""Frozen CNN feature passes on the CPU through OpenVINO's CPU runtime.

Extracting the frozen features is most of the default run's time, and in torch eager on
a CPU EfficientNet-Lite0's depthwise convolutions keep it far from the machine's matrix
peak; OpenVINO's pass runs several times faster (bench figure extraction-engines,
``python -m bench.extraction_engines``, measures the engines side by side). The network
is traced from the torch model itself, weights included, so there is one definition of
the backbone; the runtime fuses and schedules its arithmetic (batch norm folded into the
convolutions).

What is kept equal, and tested (``tests/integration/test_compiled_features.py``): in fp32 the
features agree with torch eager fp32 to 1e-4 of the largest feature; a run's features
are bit-identical across calls and independent of the batch an image is in. In bf16 the
runtime's bf16 convolutions replace torch's bf16 autocast: both differ from fp32 by
bf16's rounding (OpenVINO's by no more, tested).

Where it applies: CNN backbones (``Backbone.kind == "cnn"``) on the CPU in fp32 or
bf16. ViTs stay in torch (their passes are matrix products torch already runs near the
peak), and so do GPUs and APER's adapted CNNs (``adapted_backbone``). The runtime is
part of a result's config (``backbone.runtime``) and of the feature-cache key, so
results and cached features of the two never mix.
``$CL_BENCH_FROZEN_RUNTIME``: ``auto`` (default: OpenVINO where it applies and is
installed), ``openvino`` (the same, refusing to run without it), ``torch`` (eager
everywhere, as before).
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import warnings
from collections.abc import Iterator
from importlib import metadata

import torch

from cl_bench.backbones.base import TORCH_RUNTIME, Backbone, PreLogits
from cl_bench.cpu_flags import detect_cpu_bf16
from cl_bench.errors import UserError

SWITCH = "CL_BENCH_FROZEN_RUNTIME"
# the pass runs in STREAMS streams that split the threads, each computing SLICE images
# at a time: more images per second than one stream over a whole batch, with the same
# features bit for bit (tested); bench figure extraction-engines times both layouts
STREAMS, SLICE = 2, 8
CHOICES = ("auto", "openvino", TORCH_RUNTIME)
HINTS = {"fp32": "f32", "bf16": "bf16"}  # the run's precision -> OpenVINO's precision hint


def openvino_version() -> str | None:
    """The installed OpenVINO release (``2026.4.1``), or None."""
    try:
        return metadata.version("openvino")
    except metadata.PackageNotFoundError:
        return None


def switch() -> str:
    """``$CL_BENCH_FROZEN_RUNTIME``, checked (``auto`` when unset)."""
    raw = os.environ.get(SWITCH, "").strip().lower() or "auto"
    if raw not in CHOICES:
        raise UserError(
            f"{SWITCH}={os.environ[SWITCH]!r} is not a runtime. Set it to auto "
            "(OpenVINO for CNN feature passes on the CPU where it is installed, "
            "else torch), openvino (the same, refusing to run without it) or "
            "torch (torch eager everywhere), or unset it."
        )
    return raw


def runtime_for(kind: str, device_type: str, precision: str) -> str:
    """What runs the frozen feature passes of a ``kind`` backbone on ``device_type`` at
    ``precision``: ``torch`` or ``openvino-<release>``."""
    choice = switch()
    if choice == TORCH_RUNTIME or kind != "cnn" or device_type != "cpu" or (precision not in HINTS):
        return TORCH_RUNTIME
    if precision == "bf16" and not native_bf16():
        return TORCH_RUNTIME  # bf16 asked for where the CPU lacks it: torch emulates it
    version = openvino_version()
    if version is None:
        if choice == "openvino":
            raise UserError(
                f"{SWITCH}=openvino asks for OpenVINO, but it is not installed "
                "in this environment. Install the locked release (`pip install -c "
                "requirements/lock.txt openvino`, or `make setup`), or set "
                f"{SWITCH}=torch to extract features in torch eager."
            )
        return TORCH_RUNTIME
    return f"openvino-{version}"


def native_bf16() -> bool:
    """Whether OpenVINO runs bf16 natively on this CPU: AVX512-BF16 or AMX. Where it
    does not, its bf16 hint silently computes in fp32, so a bf16 run stays in torch,
    which emulates bf16 (what ``CL_BENCH_CPU_BF16=1`` asks for on such a CPU). Read
    from the CPU's flags and oneDNN's ISA cap (:func:`~cl_bench.cpu_flags.cpu_kind`), not
    from OpenVINO, so that choosing a runtime imports nothing."""
    return detect_cpu_bf16()


def _openvino():
    """The ``openvino`` module, its model converter without usage telemetry: the
    converter reports every conversion over the network unless the user opted out, and
    cl-bench runs offline and sends nothing, so the converter gets its own no-op stand-in
    (it falls back to one when ``openvino_telemetry`` cannot be imported)."""
    sys.modules.setdefault("openvino_telemetry", None)
    import openvino

    return openvino


@contextlib.contextmanager
def runtime_errors(name: str, precision: str) -> Iterator[None]:
    """OpenVINO's own failures (a ``RuntimeError`` or one of its own exceptions: a node
    its CPU plugin cannot set up, as when ``ONEDNN_MAX_CPU_ISA`` caps oneDNN below the
    units OpenVINO read from the CPU; an operation it cannot convert) as a
    :class:`UserError` naming the way around them."""
    try:
        yield
    except Exception as e:
        if not (isinstance(e, RuntimeError) or type(e).__module__.startswith("openvino")):
            raise
        detail = " ".join(line.strip() for line in str(e).splitlines()[-2:] if line.strip())
        raise UserError(
            f"OpenVINO {openvino_version()} could not run {name}'s frozen feature "
            f"pass on this CPU in {precision} ({detail}). Extract in torch eager instead with "
            f"{SWITCH}=torch (slower; in fp32 the same features up to float round-off), "
            "or run with --precision fp32; if ONEDNN_MAX_CPU_ISA or another oneDNN variable "
            "is set, unset it. Nothing was cached."
        ) from None


def _state_versions(model: torch.nn.Module) -> tuple[int, ...]:
    """The version counters of every parameter and buffer: any in-place change to the
    weights (an optimizer step, batch-norm statistics) moves one."""
    return tuple(t._version for t in (*model.parameters(), *model.buffers()))


@contextlib.contextmanager
def traced_in_fp32() -> Iterator[None]:
    """Trace and convert in fp32 whatever autocast the caller is under: the precision is
    the runtime's hint. TorchScript's passes insert autocast casts (which OpenVINO cannot
    convert) while its autocast mode is on, even inside ``torch.autocast(enabled=False)``;
    torch has no public switch for that mode."""
    before = torch._C._jit_set_autocast_mode(False)
    try:
        with torch.autocast("cpu", enabled=False):
            yield
    finally:
        torch._C._jit_set_autocast_mode(before)


class CompiledPass:
    """``backbone``'s frozen feature pass (normalised images in, features out) compiled
    for this CPU at the backbone's precision with ``threads`` threads, run by up to
    ``streams`` streams ``slice_size`` images at a time (None: the whole batch)."""

    def __init__(
        self,
        backbone: Backbone,
        threads: int,
        streams: int = STREAMS,
        slice_size: int | None = SLICE,
    ) -> None:
        if threads < 1 or streams < 1 or (slice_size is not None and slice_size < 1):
            raise ValueError(
                f"threads, streams and slice_size must be at least 1; got "
                f"{threads}, {streams}, {slice_size}"
            )
        ov = _openvino()
        self.model, self.threads = backbone.model, threads
        self.hint, self.state = HINTS[backbone.precision], _state_versions(backbone.model)
        size = backbone.input_size
        # a float32 copy in the default layout (OpenVINO reads the weights' memory as
        # contiguous; bf16-stored weights become exactly their fp32 values)
        plain = (
            copy.deepcopy(PreLogits(backbone.model))
            .float()
            .eval()
            .to(memory_format=torch.contiguous_format)
        )
        with torch.no_grad(), traced_in_fp32(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace's notice
            traced = torch.jit.trace(plain, torch.zeros(1, 3, size, size), check_trace=False)
            with runtime_errors(backbone.name, backbone.precision):
                graph = ov.convert_model(traced, input=[(-1, 3, size, size)])
        streams, self.slice_size = min(threads, streams), slice_size
        with runtime_errors(backbone.name, backbone.precision):
            compiled = ov.Core().compile_model(
                graph,
                "CPU",
                {
                    "INFERENCE_PRECISION_HINT": self.hint,
                    "INFERENCE_NUM_THREADS": threads,
                    "NUM_STREAMS": streams,
                    "ENABLE_CPU_PINNING": False,
                },
            )
            self.requests = [compiled.create_infer_request() for _ in range(streams)]
        self.name, self.precision = backbone.name, backbone.precision

    def fits(self, backbone: Backbone, threads: int) -> bool:
        """Whether this compilation still computes ``backbone``'s features as asked."""
        return (
            backbone.model is self.model
            and threads == self.threads
            and HINTS.get(backbone.precision) == self.hint
            and _state_versions(backbone.model) == self.state
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """(B, dim) float32 features of normalised images ``x`` (B, 3, size, size): slices
        of the batch handed to the streams in turn, each stream starting its next slice
        once its last one is read."""
        images = x.float().contiguous().numpy()  # torch's errors stay torch's
        step = self.slice_size or len(images)
        slices = [images[s : s + step] for s in range(0, len(images), step)]
        out: list[torch.Tensor] = []
        with runtime_errors(self.name, self.precision):
            for k, part in enumerate(slices):
                request = self.requests[k % len(self.requests)]
                if k >= len(self.requests):
                    out.append(self._read(request))
                request.start_async({0: part})
            for k in range(len(out), len(slices)):
                out.append(self._read(self.requests[k % len(self.requests)]))
        return torch.cat(out)

    @staticmethod
    def _read(request) -> torch.Tensor:
        """The features of ``request``'s last slice, once it is done (a copy: the
        request's output buffer is reused by its next slice)."""
        request.wait()
        return torch.from_numpy(request.get_output_tensor(0).data.copy())


def frozen_features(backbone: Backbone, x: torch.Tensor) -> torch.Tensor:
    """The frozen final feature of images ``x`` as a run's feature passes compute it:
    ``backbone.features``, or on the CPU the same network compiled by the runtime the
    runner chose (``backbone.runtime``), equal to the eager fp32 feature up to float
    round-off (tested). ``backbone.features`` stays the reference pass (FLOP counting
    runs it). The compilation is kept on the backbone and made anew when its weights,
    precision or the thread count change."""
    if backbone.runtime == TORCH_RUNTIME or x.device.type != "cpu":
        return backbone.features(x)
    threads, current = torch.get_num_threads(), backbone._compiled
    if not (isinstance(current, CompiledPass) and current.fits(backbone, threads)):
        backbone._compiled = CompiledPass(backbone, threads)
    with torch.inference_mode():
        return backbone._compiled(backbone.normalize(x.float()))
