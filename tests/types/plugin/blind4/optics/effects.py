"""Every effect of the optics library, declared once at module level."""

from typing import Final

import jax

import effax as fx

# a traced learning rate: provided by the training script
lr = fx.Ask[jax.Array]("lr")
# a temperature with a default: asking needs no handler
temperature: fx.Ask[float] = fx.Ask[float]("temperature", default=1.0)
# static configuration with a default
verbose = fx.Ask[bool]("verbose", static=True, default=False)
# static configuration without a default
mode: Final = fx.Ask[str]("mode", static=True)
# a clipping threshold, static, no default
clip_at = fx.Ask[float]("clip_at", static=True)

step_count = fx.State[jax.Array]("step_count")
losses = fx.Emit[jax.Array]("losses")
noise = fx.RandomKey("noise")
acts = fx.Tap[jax.Array]("acts")
bn = fx.StateDict[jax.Array]("bn")

# the row most layers declare
LAYER_ROW = (lr, step_count)
