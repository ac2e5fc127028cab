"""Effects shared by the mlkit layers and its training utilities."""

from __future__ import annotations

from typing import Final

import jax

import effax as fx

__all__ = [
    "LAYER_ROW",
    "STEP_ROW",
    "dropout_key",
    "forward_calls",
    "learning_rate",
    "loss_log",
    "lr_now",
    "training",
    "weight_decay",
]

training = fx.Ask[bool]("training", static=True)
dropout_key = fx.RandomKey("dropout")
forward_calls: fx.State[jax.Array] = fx.State[jax.Array]("forward_calls")
loss_log = fx.Emit[jax.Array]("loss")
learning_rate: Final = fx.Ask[float]("learning_rate", static=True)
weight_decay = fx.Ask[jax.Array]("weight_decay")
lr_now = fx.State[jax.Array]("lr_now")  # the scheduled learning rate

# rows shared by several functions
LAYER_ROW = (training, dropout_key)
STEP_ROW = (training, dropout_key, forward_calls, loss_log, lr_now)
