"""Using re-exported and renamed effects."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import aliases
import effax as fx
from aliases import counted, scaled
from aliases.lib import steps as step_count
from aliases.lib import temperature as heat_effect

local_heat = heat_effect


# case: renamed import in the row
@fx.uses(heat_effect)
def warm(x: jax.Array) -> jax.Array:
    return scaled(x) + aliases.lib.heat.ask()


# case: package re-export in the row
@fx.uses(aliases.temperature, step_count)
def warm_counted(x: jax.Array) -> jax.Array:
    return counted(x) + aliases.steps.get()


# case: local alias of an imported effect handles the call
@fx.uses()
def warm_handled(x: jax.Array) -> jax.Array:
    with local_heat.provide(jnp.float32(2.0)):
        return aliases.scaled(x)


# case: renamed state outside the row
@fx.uses(heat_effect)
def warm_missing(x: jax.Array) -> jax.Array:
    return counted(x)  # E: effax-undeclared


# case: re-exported effect operation outside the row
@fx.uses(step_count)
def read_missing(x: jax.Array) -> jax.Array:
    return x * aliases.temperature.ask()  # E: effax-undeclared


# case: alias handler leaves the state unhandled
@fx.uses()
def alias_partial(x: jax.Array) -> jax.Array:
    with local_heat.provide(jnp.float32(2.0)):
        return aliases.lib.counted(x)  # E: effax-undeclared


# case: re-exported function at module level
y_scaled = aliases.scaled(jnp.ones(2))  # E: effax-unhandled
