"""Effect declarations shared by every b9 program (declared once, imported everywhere)."""

from __future__ import annotations

import dataclasses
from typing import Final

import jax

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
lr: fx.Ask[jax.Array] = fx.Ask[jax.Array]("lr")
mode = fx.Ask[str]("mode", static=True)
training = fx.Ask[bool]("training", static=True, default=False)
verbose: Final = fx.Ask[bool]("verbose", static=True, default=False)
gain = fx.Ask[float]("gain", default=1.0)
depth = fx.Ask[int]("depth", static=True)
levels = fx.Ask[tuple[int, ...]]("levels", static=True)
label = fx.Ask[str]("label")

dropout = fx.RandomKey("dropout")
init_key = fx.RandomKey("init_key")
noise = fx.RandomKey("noise")

steps = fx.State[jax.Array]("steps")
total = fx.State[float]("total")
params = fx.State[dict[str, jax.Array]]("params")
draws = fx.State[jax.Array]("draws")

losses = fx.Emit[jax.Array]("losses")
metrics = fx.Emit[jax.Array]("metrics")
log = fx.Emit[float]("log")

acts = fx.Tap[jax.Array]("acts")
bn = fx.StateDict[jax.Array]("bn")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    width: int = 4
    depth: int = 2
    act: str = "tanh"


config = fx.Ask[ModelConfig]("config", static=True)

TRAIN_ROW = (training, dropout, steps)
EVAL_ROW = (temperature, steps)
DATA_ROW = (noise, metrics)
