"""The GPU budget of the memory estimate and its training term (issue #33, part 5).

Runs on a GPU are checked against the GPU's free memory for what lives there and
against the RAM for what stays in RAM, neither counted towards the other; a training
step counts what autograd keeps for its backward pass. The GPU is faked through
:func:`cl_bench.engine.memory.gpu_free_bytes` and the RAM through
:func:`~cl_bench.engine.memory.ram_available`, so these run on a CPU-only machine;
what autograd keeps is measured on the CPU (``saved_tensors_hooks``) on a random
ViT-Tiny."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
import torch

from cl_bench.cards.catalogue import load_method, load_scenario
from cl_bench.cards.resolve import resolve_for_backbone
from cl_bench.cards.strategy import strategy_of
from cl_bench.contract.memory import backward_pass
from cl_bench.engine import memory
from cl_bench.errors import UserError
from tests.helpers.strategies import strategy, vit_backbone

GIB = 2**30
TB = 10**12
VIT_B = "vit_base_patch16_224"


@pytest.fixture
def machine(monkeypatch):
    """``machine(ram, gpu)`` fakes this machine's available RAM and the GPU's free
    bytes; it returns the devices the estimate asked the GPU about."""
    asked = []

    def fake(ram: int, gpu: int | None) -> list:
        monkeypatch.setattr(memory, "ram_available", lambda: ram)
        monkeypatch.setattr(memory, "gpu_free_bytes", lambda device: asked.append(device) or gpu)
        return asked

    return fake


def l2p(batch_size: int):
    card = load_method("l2p")
    card.params["batch_size"] = batch_size
    return card


def check(card, device_type: str = "cuda", scenario: str = "imagenet-r", **kwargs) -> None:
    memory.check_memory(
        [card], load_scenario(scenario), VIT_B, None, device_type, precision="fp32", **kwargs
    )


def refusal(card, **kwargs) -> str:
    with pytest.raises(UserError) as e:
        check(card, **kwargs)
    return e.value.paragraph()


def test_l2p_backward_pass_on_vit_b_by_hand():
    """ViT-B/16 at 224 px, batch 128, fp32: 222 tokens (196 patches, [CLS], top_k x
    length = 25 prompts) through all 12 blocks, each keeping norm1's input (d), q, k
    and v (3 d), attention's output (d), norm2's input (d) and the GELU's input (4 d)
    per token: 10 d = 7,680 elements of 4 bytes; the last block (lean tail) keeps the
    rest beyond norm1's input and q, k, v (6 d) for the [CLS] and prompt rows only."""
    work = memory.workload(load_scenario("imagenet-r"), VIT_B, None)
    assert (work.tokens, work.hidden, work.blocks, work.dim) == (197, 3072, 12, 768)
    card = l2p(128)
    [step] = [a for a in strategy_of(card).memory(card.params, work) if a.backward]
    per_token = 768 + 3 * 768 + 768 + 768 + 4 * 768
    lean = (196 + 1 + 25) * 4 * 768 + 26 * 6 * 768  # the last block
    assert step.nbytes == 128 * ((196 + 1 + 25) * per_token * 11 + lean) * 4 == 10_012_852_224
    assert step.setting == "batch_size"
    half = replace(work, activation_bytes=2)
    assert (
        backward_pass(half, {**card.params, "checkpoint_blocks": 4}, 0, 25).nbytes
        == 128 * 222 * per_token * 8 * 2
    )  # bf16, the first 4 blocks recomputed
    finetune = load_method("finetune")
    [step] = [a for a in strategy_of(finetune).memory(finetune.params, work) if a.backward]
    assert step.nbytes == 128 * 197 * (per_token + 768 + 768 + 4 * 768) * 12 * 4


def test_l2p_at_batch_128_is_refused_on_a_gpu_with_8_gib_free(machine):
    """10.4 GB on the GPU (the frozen weights, the training batch with what its
    backward pass keeps, the pool, the classifier) against 8 GiB free; the RAM's
    terabyte does not help. At 16 GiB it would fit: the real step holds little more
    than this lower bound with a fused attention kernel, so no refusal there."""
    asked = machine(TB, 8 * GIB)
    weights = 343_194_624
    batch = 128 * 3 * 224**2 * 4 + 10_012_852_224
    total = weights + batch + 10 * 5 * 768 * 4 * 3 + 200 * 768 * 4
    assert memory.size_text(total) == "10.4 GB"
    assert refusal(l2p(128)) == (
        "A run of l2p needs at least 10.4 GB of GPU memory, but the GPU has 8.6 GB free. The "
        "largest parts: a training batch of 128 images at 224 px and what its backward pass "
        "keeps (12 ViT blocks x 222 tokens): 10.1 GB (set by l2p.batch_size); the backbone's "
        "weights: 343.2 MB (set by --image-size or --backbone). Lower l2p.batch_size, raise "
        "l2p.checkpoint_blocks (now 0, at most 12: those ViT blocks are recomputed in the "
        "backward pass instead of kept), or run on a GPU with more free memory; nothing was "
        "run or written."
    )
    assert asked == [None]
    check(l2p(16))
    machine(TB, 16 * GIB)
    check(l2p(128))


def test_ram_does_not_count_towards_the_gpu(machine):
    """The old estimate added the free RAM to the GPU's: 1 GB free on the GPU with a
    terabyte of RAM passed anything. L2P at batch 16 needs 1.7 GB on the GPU (the
    feature store's extraction batch of 256 is its largest pass there)."""
    machine(TB, 10**9)
    assert refusal(l2p(16)).startswith(
        "A run of l2p needs at least 1.7 GB of GPU memory, but the GPU has 1.0 GB free. The "
        "largest parts: a batch of 256 images through the backbone, at 224 px: 1.4 GB"
    )


def test_what_stays_in_ram_is_checked_against_the_ram_only(machine):
    """A generated scenario's 38 TB of images (320 images of 100,000 px, made as float32)
    are RAM: refused by the RAM's budget on a GPU with 80 GB free, and not counted on
    the GPU when the RAM holds them."""
    big = load_scenario("synthetic")
    big.params["dataset_args"] = {"size": 100_000}
    tosca = load_method("tosca")
    machine(24 * 10**9, 80 * 10**9)
    with pytest.raises(UserError) as e:
        memory.check_memory([tosca], big, VIT_B, None, "cuda", precision="fp32")
    assert e.value.paragraph() == (
        "A run of tosca needs at least 38,400.0 GB of RAM, but this machine has 24.0 GB of RAM "
        "available. The largest part: the scenario's images: 38,400.0 GB (set by "
        "scenario.dataset_args). Lower scenario.dataset_args (or run on a machine with more "
        "RAM); nothing was run or written."
    )
    machine(10**14, 8 * GIB)
    memory.check_memory([tosca], big, VIT_B, None, "cuda", precision="fp32")


def test_the_gpu_asked_is_the_runs_gpu(machine):
    asked = machine(TB, 10**9)
    text = refusal(l2p(16), device=torch.device("cuda", 1))
    assert asked == [torch.device("cuda", 1)]
    assert "of GPU memory, but the GPU cuda:1 has 1.0 GB free" in text


def test_on_the_cpu_everything_is_ram(machine):
    """The same run on the CPU: one budget, the cached features included; the GPU is
    not asked."""
    asked = machine(8 * GIB, 10**12)
    assert refusal(l2p(128), device_type="cpu").startswith(
        "A run of l2p needs at least 10.5 GB of memory, but this machine has 8.6 GB "
        "available. The largest parts: a training batch of 128 images"
    )
    assert asked == []


def test_gpu_free_bytes_reads_the_driver_and_the_allocators_cache(monkeypatch):
    """Free to this process: the driver's free memory plus what its caching allocator
    reserved and does not use; None without CUDA."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (5 * GIB, 80 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d: 3 * GIB)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d: 2 * GIB)
    assert memory.gpu_free_bytes(torch.device("cuda", 1)) == 6 * GIB
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert memory.gpu_free_bytes(None) is None


def test_activation_bytes_count_the_least_a_precision_keeps(monkeypatch):
    assert [memory.activation_bytes(p, "cuda") for p in ("fp32", "bf16", "fp16", None)] == [
        4,
        2,
        2,
        2,
    ]
    monkeypatch.setenv("CL_BENCH_CPU_BF16", "0")
    assert memory.activation_bytes(None, "cpu") == 4
    monkeypatch.setenv("CL_BENCH_CPU_BF16", "1")
    assert memory.activation_bytes("auto", "cpu") == 2


BATCH = 4


def saved_for_backward(model: torch.nn.Module, x: torch.Tensor, frozen: torch.nn.Module) -> int:
    """Bytes of the tensors autograd keeps for backward in ``model(x)``, each storage
    once, the parameters and buffers of both models left out (they exist anyway)."""
    weights = {
        t.untyped_storage().data_ptr()
        for m in (model, frozen)
        for t in (*m.parameters(), *m.buffers())
    }
    kept = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(kept.values())


def start_task(model: torch.nn.Module) -> None:
    """What a method's strategy does to its model before training on classes 0 and 1."""
    if hasattr(model, "begin_task"):  # prompts and adapters: the task's classes, its set
        model.begin_task(0, [0, 1])
    if hasattr(model, "see"):  # Finetune: the classes unmasked
        model.see([0, 1])
    if hasattr(model, "add_noise"):  # MiN: the task's noise
        model.add_noise()
    if getattr(model, "adapt_head", None) is not None:  # APER, RanPAC: the first session's head
        model.adapt_head.grow(2)
    model.train()


@pytest.fixture(scope="module")
def tiny():
    return vit_backbone("vit_tiny_patch16_224", 192)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(
    ("method", "sets", "precision"),
    [
        ("l2p", {}, "fp32"),
        ("l2p", {"checkpoint_blocks": 4}, "fp32"),
        ("l2p", {}, "bf16"),
        ("dualprompt", {}, "fp32"),
        ("coda-prompt", {}, "fp32"),
        ("ease", {}, "fp32"),
        ("mos", {}, "fp32"),
        ("tuna", {}, "fp32"),
        ("min", {"buffer_size": 64}, "fp32"),
        ("aper", {}, "fp32"),
        ("finetune", {}, "fp32"),
        ("finetune", {}, "bf16"),
        ("ranpac", {"adapt": "finetune", "M": 64}, "fp32"),
    ],
)
def test_the_backward_term_is_a_lower_bound_of_what_autograd_keeps(tiny, method, sets, precision):
    """Each method's training forward on a random ViT-Tiny at 32 px (5 tokens), as its
    strategy builds the model: the declared backward term never exceeds what autograd
    keeps, and in fp32 it is most of it (bf16 autocast adds half-precision copies of
    the weights, which the term does not count)."""
    torch.manual_seed(0)
    card = load_method(method)
    card.params.update(batch_size=BATCH, epochs=1, **sets)
    resolve_for_backbone(card, tiny)
    model = strategy(method, tiny, 4, **card.params).model
    start_task(model)
    half = precision == "bf16"
    with torch.autocast("cpu", dtype=torch.bfloat16) if half else contextlib.nullcontext():
        kept = saved_for_backward(model, torch.rand(BATCH, 3, 32, 32), tiny.model)
    work = replace(
        memory.workload(load_scenario("imagenet-r"), "vit_tiny_patch16_224", 32),
        activation_bytes=2 if half else 4,
    )
    declared = sum(a.nbytes for a in strategy_of(card).memory(card.params, work) if a.backward)
    assert 0 < declared <= kept
    if not half:
        assert declared * 3 > kept
