"""Effects shared by the corpus: declared once, at module level."""

from __future__ import annotations

from typing import Final

import jax
import jax.numpy as jnp

import effax as fx

# configuration
lr: Final = fx.Ask[jax.Array]("lr")
temperature = fx.Ask[jax.Array]("temperature")
train_mode = fx.Ask[bool]("train_mode", static=True, default=False)
n_layers = fx.Ask[int]("n_layers", static=True)
weight_decay = fx.Ask[jax.Array]("weight_decay", default=jnp.float32(0.0))
run_name = fx.Ask[str]("run_name", static=True, default="run")

# state
step_count = fx.State[jax.Array]("step_count")
params: fx.State[dict[str, jax.Array]] = fx.State[dict[str, jax.Array]]("params")
ema = fx.State[jax.Array]("ema")
bn_stats = fx.StateDict[jax.Array]("bn_stats")

# keys
dropout_key = fx.RandomKey("dropout_key")
init_key = fx.RandomKey("init_key")

# writers and taps
losses = fx.Emit[jax.Array]("losses")
metrics = fx.Emit[dict[str, jax.Array]]("metrics")
acts = fx.Tap[jax.Array]("acts")

TRAIN_ROW = (lr, step_count, losses)
MODEL_ROW = (train_mode, dropout_key, acts)
