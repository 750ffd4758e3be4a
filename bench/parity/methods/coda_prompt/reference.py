"""LAMDA-PILOT's side of CODA-Prompt's step check and paired seeds
(bench/parity/methods/coda_prompt/row.py).

Runs with the reference's interpreter (bench/.venv-avalanche) inside a patched
scratch copy of LAMDA-PILOT (commit 2647455): it builds PILOT's own
``models/coda_prompt.py`` ``Learner`` (``CodaPromptVitNet``: PILOT's prompted ViT,
``backbone/prompt.py`` ``CodaPrompt``, its ``nn.Linear`` head) with the parity
ViT-Tiny, and trains it with PILOT's own ``_train`` (its optimizer, its
``CosineSchedule``, its masked cross-entropy + prompt loss) on the batches that
cl-bench's driver (methods/coda_prompt/ours.py) recorded, in the same order.

What is shared, and how:

* the initial head: cl-bench's, loaded over PILOT's after it is built;
* the Gram-Schmidt of each task's new components: PILOT's ``gram_schmidt`` runs on
  cl-bench's Gaussian draws (``torch.randn_like`` replays them), and its result is
  kept in the output (``gram_schmidt``) to be compared with cl-bench's. With
  cl-bench's ``gram_schmidt: official`` (the same rule) PILOT trains from its own
  result; with ``qr`` (another rule) it trains from cl-bench's components, so that
  what is compared after the step and the tasks is the training;
* batches, test images: cl-bench's tensors (PILOT's every-fifth-epoch test accuracy,
  which it only logs, reads the seen classes' test images).

Writes (``torch.save``) ``{"after": {"step 1" | "task 1" | ... | "task T": {"params",
"logits"}}, "losses": per task, "ortho": per task (the prompt loss of every step),
"gram_schmidt": per task {name: (layers, rows, width)}}``
with the tensors named as cl-bench names them (p, k, a stacked over layers, head.*).

    python DRIVER OURS.pt OUT.pt        (cwd: the patched PILOT copy; PARITY_WEIGHTS,
                                         PARITY_IMG_SIZE set)
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import torch

PILOT_ORDER = {"init": ("p", "k", "a"), "task": ("k", "a", "p")}  # gram_schmidt call order


def stacked(learner) -> dict[str, torch.Tensor]:
    """PILOT's trainable tensors under cl-bench's names."""
    net = learner._network
    layers = net.prompt.e_layers
    out = {
        name: torch.stack(
            [getattr(net.prompt, f"e_{name}_{layer}").detach().clone() for layer in layers]
        )
        for name in ("p", "k", "a")
    }
    out["head.weight"] = net.fc.weight.detach().clone()
    out["head.bias"] = net.fc.bias.detach().clone()
    return out


def load_components(learner, tensors: dict[str, torch.Tensor], rows: slice) -> None:
    """cl-bench's components, keys and attention vectors ``rows`` into PILOT's."""
    prompt = learner._network.prompt
    with torch.no_grad():
        for name in ("p", "k", "a"):
            for i, layer in enumerate(prompt.e_layers):
                getattr(prompt, f"e_{name}_{layer}")[rows] = tensors[name][i][rows]


def load_head(learner, tensors: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        learner._network.fc.weight.copy_(tensors["head.weight"])
        learner._network.fc.bias.copy_(tensors["head.bias"])


@contextmanager
def replayed(draws: dict[str, list[torch.Tensor]], order: tuple[str, ...], n_layers: int):
    """``torch.randn_like`` returns cl-bench's draws, row by row, in the order in
    which PILOT's Gram-Schmidt asks for them (per layer, ``order`` of tensors)."""
    queue = [row for layer in range(n_layers) for name in order for row in draws[name][layer]]
    original = torch.randn_like

    def replay(t, *args, **kwargs):
        row = queue.pop(0)
        assert row.shape == t.shape, (row.shape, t.shape)
        return row.clone()

    torch.randn_like = replay
    try:
        yield
    finally:
        torch.randn_like = original
    assert not queue, f"{len(queue)} draws left: PILOT drew fewer than cl-bench"


@contextmanager
def recorded_losses(store: list[float]):
    """Every ``loss.backward()`` records the loss it starts from."""
    original = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        store.append(self.item())
        return original(self, *args, **kwargs)

    torch.Tensor.backward = backward
    try:
        yield
    finally:
        torch.Tensor.backward = original


def main(ours_path: Path, out_path: Path) -> None:
    torch.set_num_threads(1)
    sys.path.insert(0, ".")
    from models.coda_prompt import Learner

    ours = torch.load(ours_path, weights_only=False)
    params = ours["params"]
    test_x, test_y = ours["test"]
    n_classes = int(test_y.max()) + 1
    increment = int(ours["batches"][0][0][1].max()) + 1
    n_tasks = n_classes // increment
    args = {
        "model_name": "coda_prompt",
        "backbone_type": "vit_tiny_patch16_224_coda_prompt",
        "pretrained": False,
        "nb_classes": n_classes,
        "nb_tasks": n_tasks,
        "prompt_param": [params["pool_size"], params["length"], params["ortho_mu"]],
        "batch_size": params["batch_size"],
        "init_lr": params["lr"],
        "weight_decay": params["weight_decay"],
        "min_lr": 1e-5,
        "optimizer": params["optimizer"],
        "scheduler": "cosine",
        "tuned_epoch": params["epochs"],
        "memory_size": 0,
        "device": [torch.device("cpu")],
    }
    assert params["scheduler"] == "coda_cosine" and params["layers"] == [0, 1, 2, 3, 4]
    n_layers = len(params["layers"])
    with replayed(ours["draws"][0], PILOT_ORDER["init"], n_layers):
        learner = Learner(args)
    per = params["pool_size"] // n_tasks
    gram = [{k: v[:, :per].clone() for k, v in stacked(learner).items() if k in ("p", "k", "a")}]
    load_head(learner, ours["init"][0])
    # the same rule on both sides: PILOT's own components from the shared draws;
    # else cl-bench's (its rule is not PILOT's), zeros beyond the first task's included
    own = params["gram_schmidt"] == "official"
    if not own:
        load_components(learner, ours["init"][0], slice(None))

    out = {"after": {}, "losses": [], "gram_schmidt": gram}

    def logits() -> torch.Tensor:
        net = learner._network
        seen = learner._total_classes
        net.eval()
        with torch.no_grad():
            value = net(test_x[test_y < seen])[:, :seen]
        net.train()
        return value

    def capture_first_step(optimizer) -> torch.optim.Optimizer:
        def hook(opt, *_):
            if learner._cur_task == 0 and "step 1" not in out["after"]:
                out["after"]["step 1"] = {"params": stacked(learner), "logits": logits()}

        optimizer.register_step_post_hook(hook)
        return optimizer

    ortho: list[float] = []
    forward = learner._network.forward

    def recording_forward(*args, **kwargs):
        result = forward(*args, **kwargs)
        if kwargs.get("train"):
            ortho.append(result[1].sum().item())  # the prompt loss PILOT adds
        return result

    learner._network.forward = recording_forward
    get_optimizer = learner.get_optimizer
    learner.get_optimizer = lambda: capture_first_step(get_optimizer())
    for task, batches in enumerate(ours["batches"]):
        learner._cur_task = task
        if task > 0:
            with replayed(ours["draws"][task], PILOT_ORDER["task"], n_layers):
                learner._network.prompt.process_task_count()
            rows = slice(task * per, (task + 1) * per)
            gram.append(
                {k: v[:, rows].clone() for k, v in stacked(learner).items() if k in ("p", "k", "a")}
            )
            if not own:
                load_components(learner, ours["init"][task], rows)
        learner._total_classes = learner._known_classes + increment
        losses: list[float] = []
        seen = test_y < learner._total_classes  # PILOT's every-5th-epoch test accuracy
        with recorded_losses(losses):
            learner._train([(None, x, y) for x, y in batches], [(None, test_x[seen], test_y[seen])])
        out["losses"].append(losses)
        out.setdefault("ortho", []).append(ortho[:])
        ortho.clear()
        out["after"][f"task {task + 1}"] = {"params": stacked(learner), "logits": logits()}
        learner.after_task()
    torch.save(out, out_path)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
