"""Effect declarations, once, at module level."""

import dataclasses
from typing import Final

import jax

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
scale: fx.Ask[float] = fx.Ask[float]("scale")
mode = fx.Ask[str]("mode", static=True)
depth: Final = fx.Ask[int]("depth", static=True)
verbose = fx.Ask[bool]("verbose", static=True, default=False)
lr = fx.Ask[float]("lr", default=1e-2)
steps = fx.State[jax.Array]("steps")
total = fx.State[float]("total")
params = fx.State[dict[str, jax.Array]]("params")
dropout = fx.RandomKey("dropout")
losses = fx.Emit[jax.Array]("losses")
acts = fx.Tap[jax.Array]("acts")
bn = fx.StateDict[jax.Array]("bn")

@dataclasses.dataclass(frozen=True)
class Config:
    width: int = 4
    layers: int = 2

config = fx.Ask[Config]("config", static=True)

ROW = (temperature, steps)
