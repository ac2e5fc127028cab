"""Every effect of the project, declared once at module level."""

from __future__ import annotations

import dataclasses
from typing import Any, Final

import jax
import optax  # E: import-untyped

import effax as fx


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hashable configuration: fit for a static `Ask`."""

    depth: int = 2
    width: int = 8
    activation: str = "tanh"
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """Frozen, but it holds a list: hashing it fails."""

    name: str
    seeds: list[int]


# configuration
config = fx.Ask[ModelConfig]("config", static=True)
mode = fx.Ask[str]("mode", static=True)
label = fx.Ask[str]("label")  # traced: fine eagerly, not across jit
temperature = fx.Ask[jax.Array]("temperature")
learning_rate: fx.Ask[jax.Array] = fx.Ask[jax.Array]("learning_rate")
weight_decay: Final = fx.Ask[float]("weight_decay", default=1e-4)
verbose = fx.Ask[bool]("verbose", static=True, default=False)
sweep = fx.Ask[SweepConfig]("sweep", static=True)
schedule = fx.Ask[tuple[float, ...]]("schedule", static=True)

# state
params = fx.State[dict[str, jax.Array]]("params")
opt_state = fx.State[optax.OptState]("opt_state")
steps = fx.State[jax.Array]("steps")
running_loss = fx.State[float]("running_loss")
tag = fx.State[str]("tag")
bn_stats = fx.StateDict[jax.Array]("bn_stats")

# randomness
dropout = fx.RandomKey("dropout")
init_key = fx.RandomKey("init_key")
noise = fx.RandomKey("noise")

# outputs
losses = fx.Emit[jax.Array]("losses")
metrics = fx.Emit[dict[str, jax.Array]]("metrics")
acts = fx.Tap[jax.Array]("acts")
seen = fx.Tap[jax.Array]("seen")
draws = fx.State[jax.Array]("draws")

# rows shared by several modules
TRAIN_ROW = (params, opt_state, learning_rate, losses)
MODEL_ROW = (temperature, dropout)

Batch = dict[str, Any]
