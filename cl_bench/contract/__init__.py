"""The method contract: what a strategy class declares so that cl-bench can run it,
and ``drive``, the one loop that runs any strategy over a stream. This package is
what a method imports; every name below is importable from ``cl_bench.contract``.

The runner, ``cl-bench account``, the benchmarks and the tests never guess what a
method is from its attributes; they read its declaration. To bring your own method,
write an Avalanche ``SupervisedTemplate`` subclass that also derives from
``Method``, declare its ``MethodSpec``, and name the class in a method
card (``strategy: package.module:Class``):

    class MyMethod(Method, SupervisedTemplate):
        spec = MethodSpec(inputs=Inputs.IMAGES, trains_backbone=False,
                          schedule=Schedule.PER_TASK)

        def __init__(self, *, params, backbone, n_classes, device, plugins, evaluator):
            ...  # build the model; pass plugins and evaluator on to the template

What a method declares:

* **what it consumes** (``inputs``, ``Inputs``): ``FEATURES``, the frozen final
  [CLS] feature of every image, extracted once and cached (the method never runs the
  backbone; training and evaluation run on one thread, and the backbone's one pass
  per image is added to its inference FLOPs); ``IMAGES``, the images in [0, 1] at the
  backbone's input size; ``IMAGES_WITH_QUERY``, images plus their frozen feature from
  the cache as a third mini-batch element, where the transform allows it (test
  images; training images held in memory); ``ADAPTED_FEATURES``, first-session
  adaptation (APER, RanPAC): the first task's experience holds its training images, on
  which the method adapts a private version of the backbone (its weights or adapters
  live in the method's model, so they are stored and checkpointed); every later
  training experience and every test experience then holds features, as for
  ``FEATURES``, of the backbones the method names once adapted
  (``Method.feature_backbones``: the frozen one, the adapted one, or both,
  concatenated in that order), each extracted once and cached under its own weights
  digest. The method fits its classifier on the first task from those backbones'
  features of that task's images, which it computes itself (one pass per image, as
  the store would); it never runs a backbone after the first task. ``drive``
  takes an ``AdaptedStream`` for it;
* **whether it trains the backbone** (``trains_backbone``): such a method trains a
  private copy of the shared backbone, which is then kept in fp32 for every method of
  the run (no bf16 weight storage);
* **how it is driven** (``schedule``, ``Schedule``): ``PER_TASK`` trains task i
  then evaluates on the test images of the classes seen so far, for every task, and
  can resume after any finished task; ``JOINT`` trains once on the list of every
  task's experience, then runs the same evaluations (an upper bound, never resumed
  mid-stream);
* **which settings define its protocol** (``protocol``, a tuple of
  ``ProtocolSetting``, each a card key with a one-line meaning): the settings
  that decide how it is evaluated (TOSCA's ``selection``, the prompt methods'
  ``batchwise``, ``augment_views``, ``eval_batch_size``); every result records their
  values, meanings and label in its ``protocol`` block, and the reports read them
  from there, so no other part of cl-bench names them;
* **what it validates before any run** (``Method.check_params``): settings that
  only the backbone can check (e.g. block indices); the card's bounds and choices are
  checked earlier. The runner calls it for every method of a command before the first
  run starts, so a bad setting writes nothing;
* **what it fills in from the backbone** (``Method.resolve_params``): a setting
  whose value depends on the backbone (``adapt: auto``) is replaced by the value used
  before the run's config is hashed, so the result records what ran; the card's
  ``defaults_when:`` values for the resolved value follow (``cl_bench.cards.resolve``,
  the one place run, dry run and account settle a card);
* **what it allocates that scales with its settings** (``Method.memory``): its
  dominant allocations (a Gram matrix, one adapter set per task, prototypes, a
  prompt pool), each with the setting that scales it, from the settings and the
  run's ``Workload``; with what every run allocates, the
  estimate refuses a command whose runs cannot fit in memory before anything runs
  (``cl_bench.engine.memory``);
* **which backbones it runs on** (``backbones``: ``any``, ``vit`` or ``cnn``) and
  **what it puts inside the backbone** (``injects``, e.g. "injects prompts into
  transformer blocks"): a run on another backbone is refused before anything loads,
  with one message that names it (``check_backbone``);
* **which backbone passes make its features** (``Method.feature_backbones``): the
  frozen backbone for a ``FEATURES`` method; the accounting counts one pass of each
  per test image;
* **which settings it reads** (``required_settings``): a card that lacks one is
  refused when it loads (``cl_bench.cards.needs``), instead of a ``KeyError``
  mid-run; a class derived from a built-in strategy needs that card's settings too;
* **whether its tasks repeat** (``Method.repeats_after``): the number of first tasks
  after which every task adds what the one before added, for its own classes, and its
  training step and the inference after it run the same code over one more task's worth
  of what is kept (no branch on the task's index or the classes seen). ``cl-bench
  account`` then runs those tasks and six more and carries each count exactly to the end
  of a long stream (``cl_bench.accounting.extend``: a polynomial of degree at most 3 in
  the task's index, checked on the last two tasks run; every task runs where the check
  fails). Default: every task runs. Declare it only where no later task can change what
  runs: a switch at a task count set by a setting (a pool of prompts used up) belongs in
  the returned number, or, where a setting switches inference from a fixed task on (a
  different inference beyond some task), in ``Method.account_settings``: the settings
  under which a run counts the same, with that inference from the first task;
* **how it reports routing** (``Method.routing``): a method that picks a module
  or prompt per test image returns the choice per sample of the last evaluated batch,
  and the recorder scores it against the image's task (``routing_acc``);
* **what it stores**: everything reachable from ``strategy.model`` (parameters and
  buffers) beyond the pretrained backbone: a model of the backbone's type inside it,
  the shared one or a fine-tuned copy that replaces it (Finetune, EWC, Joint), is the
  backbone and not added; weights kept beside it (APER's adapted copy) are; and every tensor
  held by the strategy's plugins, except plugins that derive from
  ``Bookkeeping`` (measurement and data plumbing, such as the recorder). A
  plugin that keeps the method's state (EWC's importances) is an ordinary plugin.

A method that iterates a dataset itself, outside Avalanche's training and evaluation
loops (class statistics, prototypes, a fit), builds that loader with
``method_loader``, so it gets the run's loader settings (worker processes for
images on disk, pinned batches on a GPU: ``cl_bench.contract.loading``), the same
as Avalanche's loaders get from the engine; ``class_means`` gives the mean embedding
per class of a dataset through it (prototypes: ``cl_bench.contract.statistics``).

A ``PER_TASK`` strategy that also derives from ``Resumable`` (all shipped ones
do) is checkpointed after every task, so a killed run resumes at its next task with
the numbers of an uninterrupted run; one that does not starts over when killed. A
model that grows submodules during a run derives from ``Regrows`` and rebuilds
them from the saved state before it loads (``cl_bench.contract.resume``).

A method card repeats ``inputs:`` and ``backbones:`` for the reader; where it does,
they must equal the class's declaration, which is checked when the card loads.

A plain Avalanche strategy that knows nothing about cl-bench declares the same in its
card instead (a ``contract:`` block, ``cl_bench.contract.plain``). A strategy
class that declares nothing, in neither place, is refused when its card is loaded,
with one message that says both ways (``spec_of``).
"""

from cl_bench.contract.drive import AdaptedStream, drive
from cl_bench.contract.loading import (
    Loading,
    configure_loading,
    current_loading,
    loader_workers,
    method_loader,
    usable_cpus,
)
from cl_bench.contract.memory import Allocation, Workload
from cl_bench.contract.protocol import AUGMENT_VIEWS, EVAL_BATCH_SIZE, ProtocolSetting
from cl_bench.contract.resume import Regrows, Resumable, Stateful
from cl_bench.contract.spec import (
    Bookkeeping,
    Inputs,
    Method,
    MethodSpec,
    Schedule,
    check_backbone,
    spec_of,
)
from cl_bench.contract.statistics import class_means

__all__ = [
    "AUGMENT_VIEWS",
    "EVAL_BATCH_SIZE",
    "AdaptedStream",
    "Allocation",
    "Bookkeeping",
    "Inputs",
    "Loading",
    "Method",
    "MethodSpec",
    "ProtocolSetting",
    "Regrows",
    "Resumable",
    "Schedule",
    "Stateful",
    "Workload",
    "check_backbone",
    "class_means",
    "configure_loading",
    "current_loading",
    "drive",
    "loader_workers",
    "method_loader",
    "spec_of",
    "usable_cpus",
]
