"""The effects the trainer's layers and loop perform."""

import jax

import effax as fx

training = fx.Ask[bool]("training", static=True)
dropout_key = fx.RandomKey("dropout")
calls = fx.State[jax.Array]("calls")
losses = fx.Emit[jax.Array]("losses")
learning_rate = fx.Ask[jax.Array]("learning_rate")

MODEL_ROW = (training, dropout_key)
STEP_ROW = (*MODEL_ROW, calls, losses)
