"""mlkit: Equinox-style layers whose context comes from effax effects."""

from .effects import *  # noqa: F403
from .layers import MLP as MLP, Dropout as Dropout
from .optim import (
    base_lr as base_lr,
    compiled_step as compiled_step,
    loss_fn as loss_fn,
    predict as predict,
    predict_batch as predict_batch,
    sgd_update as sgd_update,
    train_step as train_step,
)
