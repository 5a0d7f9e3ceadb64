"""
A trainer callback for tests/distributed/test_two_nodes.py: where `ELMOC_TEST_NODE_DOWN` is
`EPOCH:BATCH` (set for one node's processes), the worker that completes that batch of that
epoch SIGKILLs its node's whole process group, as a machine going down, once its node's
checkpoint of the batch before exists. The kill happens at that point of training whatever the
machine's load (a test that watched for the checkpoint and killed from outside raced the
training: on a busy machine the nodes could train on before the kill landed).
"""

import os
import signal
import time

from allennlp.training.callbacks.callback import TrainerCallback

VARIABLE = "ELMOC_TEST_NODE_DOWN"


@TrainerCallback.register("test_node_down")
class NodeDownCallback(TrainerCallback):
    def on_batch(
        self,
        trainer,
        batch_inputs,
        batch_outputs,
        batch_metrics,
        epoch: int,
        batch_number: int,
        is_training: bool,
        is_primary: bool = True,
        **kwargs,
    ) -> None:
        when = os.environ.get(VARIABLE)
        if (
            not is_training
            or not when
            or [epoch, batch_number] != [int(n) for n in when.split(":")]
        ):
            return
        # The node's checkpoint of the batch before: saved by its first worker before the
        # collective operations of this batch, so it exists already (or very soon, seen from
        # its other worker).
        checkpoint = os.path.join(
            self.serialization_dir, f"model_state_e{epoch}_b{batch_number - 1}.th"
        )
        while not os.path.exists(checkpoint):
            time.sleep(0.01)
        os.killpg(os.getpgid(0), signal.SIGKILL)
