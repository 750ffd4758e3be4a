"""Figure prompts-against-pilot, the peer side: LAMDA-PILOT's own DualPrompt or
CODA-Prompt ``Learner`` (github sun-hailong/LAMDA-PILOT at 2647455,
``models/dualprompt.py`` / ``models/coda_prompt.py``, with its ``exps/dualprompt.json``
/ ``exps/coda_prompt.json`` settings) on the shape of ``bench.prompt_shape``: ViT-B/16
random weights (``pretrained: false``, nothing fetched), 224 px, 4 classes x 4 training
images, 2 tasks of 2 classes, 1 epoch, batch 8, the 8 test images evaluated after each
task. PILOT's ``_train`` runs on that task's one batch (its own optimizer, prompt
transfer and loss, and its query pass per batch); the evaluation is its network's
forward, as its ``_eval_cnn`` runs it. Default threads, as ours.

Runs with bench/.venv-avalanche's interpreter (timm 0.6.13, which PILOT's ViTs are
written for), in a scratch copy of a LAMDA-PILOT checkout that bench/parity/patch_pilot_prompts.py
edited (``bench.run prompts-against-pilot`` makes it): at ViT-B/16 its edits change
nothing but CODA-Prompt's prompt loss, which PILOT starts as a leaf tensor that PyTorch
refuses to add to in place on the CPU. Prints one JSON line; the time covers model
creation, training and evaluation (imports excluded, printed separately).

    cd SCRATCH/pilot && python bench/pilot_prompt_shape.py {dualprompt,coda-prompt}
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

T_IMPORT = time.perf_counter()
import torch  # noqa: E402

sys.path.insert(0, str(Path.cwd()))

import trainer  # noqa: E402  (PILOT's modules, from the checkout this runs in)
from utils import factory  # noqa: E402

NAMES = {"dualprompt": "dualprompt", "coda-prompt": "coda_prompt"}
SHAPE = {
    "pretrained": False,
    "batch_size": 8,
    "tuned_epoch": 1,
    "init_cls": 2,
    "increment": 2,
    "nb_classes": 4,
    "nb_tasks": 2,
    "device": [-1],
}


def logits(learner, name: str, x: torch.Tensor) -> torch.Tensor:
    network = learner._network
    network.eval()
    with torch.no_grad():
        if name == "dualprompt":
            return network(x, task_id=learner._cur_task)["logits"]
        return network(x)


def main(method: str) -> dict:
    imports = time.perf_counter() - T_IMPORT
    name = NAMES[method]
    args = {**json.loads(Path(f"exps/{name}.json").read_text()), **SHAPE}
    if name == "coda_prompt":  # its CosineSchedule divides by (epochs - 1); it costs nothing
        args["scheduler"] = "constant"
    trainer._set_device(args)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    learner = factory.get_model(name, args)
    g = torch.Generator().manual_seed(0)
    train_x = torch.rand(16, 3, 224, 224, generator=g)
    train_y = torch.arange(4).repeat_interleave(4)
    test_x = torch.rand(8, 3, 224, 224, generator=g)
    for task in range(2):
        learner._cur_task += 1
        if task > 0 and name == "coda_prompt":
            learner._network.prompt.process_task_count()
        learner._total_classes = learner._known_classes + 2
        mine = (train_y >= 2 * task) & (train_y < 2 * task + 2)
        learner._train([(None, train_x[mine], train_y[mine])], [])
        logits(learner, name, test_x)  # all 8 test images
        learner.after_task()
    return {
        "method": method,
        "seconds": time.perf_counter() - t0,
        "imports_s": imports,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
