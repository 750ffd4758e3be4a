"""Joint: the upper bound. One fine-tuning of backbone + head on the data of
every task at once (i.i.d. over all classes), with the same model, loss and
optimizer as Finetune:

    L = CE(softmax over C W f_theta(x), y),   (x, y) in D_1 u ... u D_T.

Evaluation after "task i" scores the one jointly trained model on the test
images of the classes seen by task i, with the logits of the other classes
masked, so that row i of the accuracy matrix is over the same label set as a
continual method's row i.
"""

from __future__ import annotations

from avalanche.training.supervised import JointTraining

from cl_bench.contract import EVAL_BATCH_SIZE, Inputs, MethodSpec, Schedule
from cl_bench.strategies.blocks.backbone_copy import FinetuneTemplate, dataset_classes


class Joint(FinetuneTemplate, JointTraining):
    """Avalanche's JointTraining (the experiences' datasets concatenated, one
    training experience, so plugins see before/after_training_exp once) with
    the shared fine-tuning model and optimizer.

    :func:`cl_bench.contract.drive` calls ``train`` once with the whole list of
    experiences, then ``eval`` per seen-classes test experience.
    """

    spec = MethodSpec(
        inputs=Inputs.IMAGES,
        trains_backbone=True,
        schedule=Schedule.JOINT,
        protocol=(EVAL_BATCH_SIZE,),
    )

    def model_adaptation(self, model=None):
        """Training: unmask every class; evaluation: only the evaluated classes."""
        model = super().model_adaptation(model)
        if not self.is_training:
            model.restrict(dataset_classes(self.adapted_dataset))
        return model
