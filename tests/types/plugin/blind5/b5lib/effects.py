"""Effect declarations shared by the blind5 corpus (module level, one per effect)."""

from __future__ import annotations

import dataclasses
from typing import Final

import jax

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
learning_rate: fx.Ask[jax.Array] = fx.Ask[jax.Array]("learning_rate")
mode = fx.Ask[str]("mode", static=True)
run_tag = fx.Ask[str]("run_tag")  # traced: fine eagerly, not across a compiled call
steps = fx.State[jax.Array]("steps")
label = fx.State[str]("label")
total: Final = fx.State[float]("total")
losses = fx.Emit[jax.Array]("losses")
acts = fx.Tap[jax.Array]("acts")
dropout = fx.RandomKey("dropout")
init_key = fx.RandomKey("init_key")
verbose = fx.Ask[bool]("verbose", static=True, default=False)
gain = fx.Ask[float]("gain", default=1.0)
bn = fx.StateDict[jax.Array]("bn")
levels = fx.Ask[tuple[int, ...]]("levels", static=True)

TRAIN_ROW = (learning_rate, steps, losses)


@dataclasses.dataclass(frozen=True)
class NetConfig:
    depth: int = 2
    widths: tuple[int, ...] = (4, 4)


@dataclasses.dataclass(frozen=True)
class LooseConfig:
    depth: int
    widths: list[int]


net_config = fx.Ask[NetConfig]("net_config", static=True)
loose_config = fx.Ask[LooseConfig]("loose_config", static=True)
