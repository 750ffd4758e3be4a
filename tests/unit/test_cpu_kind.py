"""The CPU's kind (which units its kernels are chosen for) from /proc/cpuinfo's flags,
held to oneDNN's ISA cap where one is set, and the feature cache keyed by it: bf16
features of an AMX CPU and of an AVX512-BF16 one differ (the default run prints different
numbers), so a cache shared between them must give each its own entries."""

from __future__ import annotations

import pytest
import torch

from cl_bench import cpu_flags
from cl_bench.engine import features
from cl_bench.engine.features import FeatureStore
from tests.helpers.features import fake_parts

SAPPHIRE = "flags : fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
GENOA = "flags : fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni"
SKYLAKE = "flags : fpu sse2 avx2 avx512f avx512cd"
ZEN2 = "flags : fpu sse2 avx avx2 fma"


@pytest.mark.parametrize(
    ("flags", "kind"),
    [
        (SAPPHIRE, "amx"),
        (GENOA, "avx512_bf16"),
        (SKYLAKE, "avx512"),
        (ZEN2, "avx2"),
        ("flags : fpu sse2", "baseline"),
        ("", "baseline"),
        ("flags : avx2 avx512_bf16x", "avx2"),
    ],
)  # whole flags only, never a prefix
def test_the_kind_is_the_most_capable_unit_the_cpu_reports(flags, kind):
    assert cpu_flags.cpu_kind(flags, environ={}) == kind


@pytest.mark.parametrize(
    ("flags", "bf16"), [(SAPPHIRE, True), (GENOA, True), (SKYLAKE, False), (ZEN2, False)]
)
def test_bf16_units_are_amx_or_avx512_bf16(monkeypatch, flags, bf16):
    for var in cpu_flags.ISA_CAPS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cpu_flags, "_flags", lambda: flags)
    assert cpu_flags.detect_cpu_bf16() is bf16


@pytest.mark.parametrize(
    ("cap", "sapphire", "zen2"),
    [
        ("AVX2", "avx2", "avx2"),
        ("avx2_vnni_2", "avx2", "avx2"),
        ("AVX512_CORE", "avx512", "avx2"),
        ("AVX512_CORE_VNNI", "avx512", "avx2"),
        ("AVX512_CORE_BF16", "avx512_bf16", "avx2"),
        ("AVX10_1_512", "avx512_bf16", "avx2"),
        ("AVX512_CORE_AMX", "amx", "avx2"),
        ("AVX10_1_512_AMX_FP16", "amx", "avx2"),
        ("SSE41", "baseline", "baseline"),
        ("AVX", "baseline", "baseline"),
        ("ALL", "amx", "avx2"),
        ("DEFAULT", "amx", "avx2"),
        ("", "amx", "avx2"),
        ("NOT_AN_ISA", "amx", "avx2"),
        (" AVX2", "amx", "avx2"),
        ("AVX2_FOO", "amx", "avx2"),
        ("avx10_2_512_amx_2", "amx", "avx2"),
    ],
)  # oneDNN ignores a name it does not know
def test_onednn_isa_cap_holds_the_kind_below_the_cpu(cap, sapphire, zen2):
    """A cap lowers the kind to what oneDNN may dispatch to, never raises it."""
    for var in cpu_flags.ISA_CAPS:
        assert cpu_flags.cpu_kind(SAPPHIRE, environ={var: cap}) == sapphire
        assert cpu_flags.cpu_kind(ZEN2, environ={var: cap}) == zen2


def test_onednn_reads_its_own_name_before_the_old_one():
    both = {"ONEDNN_MAX_CPU_ISA": "ALL", "DNNL_MAX_CPU_ISA": "AVX2"}
    assert cpu_flags.cpu_kind(SAPPHIRE, environ=both) == "amx"
    assert (
        cpu_flags.cpu_kind(SAPPHIRE, environ={"ONEDNN_MAX_CPU_ISA": "", "DNNL_MAX_CPU_ISA": "AVX2"})
        == "avx2"
    )


def test_an_amx_cpu_held_to_avx2_has_no_bf16_units_and_keys_as_avx2(monkeypatch):
    """``--precision auto`` then picks fp32 and OpenVINO is not asked for bf16; the
    features are cached as an AVX2 CPU's; the run's ``env`` records the kind and the cap."""
    from cl_bench.backbones.compiled import native_bf16
    from cl_bench.engine import environment
    from cl_bench.engine.environment import cpu_has_bf16

    for var in ("CL_BENCH_CPU_BF16", *cpu_flags.ISA_CAPS):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cpu_flags, "_flags", lambda: SAPPHIRE)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert (cpu_flags.detect_cpu_bf16(), cpu_has_bf16(), native_bf16()) == (False,) * 3
    _, backbone, data = fake_parts([])
    key = FeatureStore(torch.device("cpu"), progress=False).key(backbone, data, "train")
    assert key[-1] == ("cpu", "avx2")
    env = environment.versions(torch.device("cpu"), None)
    assert (env["cpu_kind"], env["cpu_isa_cap"], env["cpu_bf16"]["detected"]) == (
        "avx2",
        "AVX2",
        False,
    )
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert (cpu_flags.detect_cpu_bf16(), cpu_has_bf16(), native_bf16()) == (True,) * 3
    env = environment.versions(torch.device("cpu"), None)
    assert (env["cpu_kind"], env["cpu_isa_cap"], env["cpu_bf16"]["detected"]) == ("amx", None, True)


def test_each_cpu_kind_extracts_its_own_features(tmp_path, monkeypatch):
    """One cache, two kinds of CPU: the second kind extracts again rather than read the
    first's features; each kind then reads its own entry."""
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path))
    calls = []
    extract, backbone, data = fake_parts(calls)
    monkeypatch.setattr(features, "extract", extract)
    keys, hits = {}, {}
    for kind in ("avx512_bf16", "amx", "avx512_bf16", "amx"):
        monkeypatch.setattr(features, "cpu_kind", lambda kind=kind: kind)
        store = FeatureStore(torch.device("cpu"), precision="bf16", progress=False)
        store.get(backbone, data, "train")
        keys[kind], hits[kind] = store.key(backbone, data, "train"), store.hits
    assert calls == [5, 5] and hits == {"avx512_bf16": 1, "amx": 1}
    assert keys["amx"][-1] == ("cpu", "amx") and keys["avx512_bf16"][:-1] == keys["amx"][:-1]
    assert len(list(tmp_path.rglob("*.npy"))) == 2


def test_a_gpu_key_names_the_gpu_not_the_cpu(monkeypatch):
    _, backbone, data = fake_parts([])
    gpu = {"kind": "cuda", "arch": "sm_90", "deterministic": "strict"}
    key = FeatureStore(torch.device("cuda"), progress=False, device_key=gpu).key(
        backbone, data, "train"
    )
    assert key[-1] == tuple(sorted(gpu.items()))
    assert not any(isinstance(part, tuple) and part[0] == "cpu" for part in key)
