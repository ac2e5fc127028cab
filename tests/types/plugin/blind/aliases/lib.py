"""Effects declared under several names."""

from __future__ import annotations

from typing import Final

import jax

import effax as fx

temperature: Final = fx.Ask[jax.Array]("temperature")
heat = temperature
steps = fx.State[jax.Array]("steps")


@fx.uses(heat)
def scaled(x: jax.Array) -> jax.Array:
    return x * temperature.ask()


@fx.uses(temperature, steps)
def counted(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return scaled(x)
