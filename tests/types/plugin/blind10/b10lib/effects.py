"""Effect declarations shared by the blind10 programs (declared once, imported everywhere)."""

from __future__ import annotations

from typing import Final

import jax

import effax as fx

# context values
temperature = fx.Ask[jax.Array]("temperature")
lr: Final = fx.Ask[jax.Array]("lr")
training = fx.Ask[bool]("training", static=True, default=False)
verbose = fx.Ask[bool]("verbose", static=True, default=False)
eps: fx.Ask[float] = fx.Ask[float]("eps", default=1e-5)
n_heads = fx.Ask[int]("n_heads", static=True)
scale_factor = fx.Ask[jax.Array]("scale_factor")

# state
step_count = fx.State[jax.Array]("step_count")
params = fx.State[dict[str, jax.Array]]("params")
total_loss = fx.State[jax.Array]("total_loss")
ema = fx.State[jax.Array]("ema")
bn_stats = fx.StateDict[jax.Array]("bn_stats")

# randomness
dropout = fx.RandomKey("dropout")
init_key = fx.RandomKey("init_key")
noise = fx.RandomKey("noise")

# emits and taps
losses = fx.Emit[jax.Array]("losses")
metrics = fx.Emit[jax.Array]("metrics")
acts = fx.Tap[jax.Array]("acts")

# shared rows
TRAIN_ROW = (dropout, step_count, losses)
SAMPLER_ROW = (noise, step_count)
