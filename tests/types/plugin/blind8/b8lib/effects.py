"""Effect declarations shared by every program of the corpus (declared once, imported)."""

from __future__ import annotations

import dataclasses
from typing import Final

import jax

import effax as fx


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Static configuration: hashable, so it can shape the traced code."""

    depth: int = 2
    width: int = 8
    activation: str = "tanh"


temperature = fx.Ask[jax.Array]("temperature")
learning_rate = fx.Ask[float]("learning_rate", default=0.05)
training = fx.Ask[bool]("training", static=True, default=False)
config: fx.Ask[RunConfig] = fx.Ask[RunConfig]("config", static=True)

steps = fx.State[jax.Array]("steps")
params_state = fx.State[dict[str, jax.Array]]("params")
running = fx.StateDict[jax.Array]("running")

dropout = fx.RandomKey("dropout")
noise: Final = fx.RandomKey("noise")

losses = fx.Emit[jax.Array]("losses")
metrics = fx.Emit[dict[str, jax.Array]]("metrics")
acts = fx.Tap[jax.Array]("acts")

TRAIN_ROW = (steps, losses, dropout, training)
