"""Training utilities: checkpoints of a session's variables (``kl.train.Saver``) and the
state file that records them (``latest_checkpoint``, ``get_checkpoint_state``), as in
TensorFlow's ``tf.compat.v1.train``."""

from kernloom.train.checkpoint_management import (
    CheckpointState,
    checkpoint_exists,
    get_checkpoint_state,
    latest_checkpoint,
)
from kernloom.train.saver import CHECKPOINT_FORMAT, Saver, read_checkpoint_manifest

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointState",
    "Saver",
    "checkpoint_exists",
    "get_checkpoint_state",
    "latest_checkpoint",
    "read_checkpoint_manifest",
]
