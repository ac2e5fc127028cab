"""Overloaded functions, conditional callees and rows given as tuples."""

from __future__ import annotations

from typing import overload

import jax
import jax.numpy as jnp

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
steps = fx.State[jax.Array]("steps")
log = fx.Emit[jax.Array]("log")
noise = fx.RandomKey("noise")

MODEL_ROW = (temperature, noise)
TRAIN_ROW = (*MODEL_ROW, steps)


@overload
def scale(x: float) -> float: ...
@overload
def scale(x: jax.Array) -> jax.Array: ...
@fx.uses(temperature)
def scale(x: float | jax.Array) -> float | jax.Array:
    return x * temperature.ask()


@fx.uses(temperature)
def scaled(x: jax.Array) -> jax.Array:
    return x * temperature.ask()


@fx.uses(noise)
def noisy(x: jax.Array) -> jax.Array:
    return x + jax.random.normal(noise.next_key(), x.shape)


@fx.uses(*MODEL_ROW)
def model(x: jax.Array) -> jax.Array:
    return noisy(scaled(x))


@fx.uses(*TRAIN_ROW)
def train_step(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return model(x)


# case: overloaded function within the row
@fx.uses(temperature)
def use_scale(x: jax.Array) -> jax.Array:
    return scale(x) + scale(2.0)


# case: conditional callee, both declared
@fx.uses(temperature, noise)
def pick(x: jax.Array, deterministic: bool) -> jax.Array:
    return (scaled if deterministic else noisy)(x)


# case: row tuple covers the callee
@fx.uses(*MODEL_ROW)
def twice(x: jax.Array) -> jax.Array:
    return model(model(x))


# case: row tuple extended inline
@fx.uses(*MODEL_ROW, steps, log)
def logged_step(x: jax.Array) -> jax.Array:
    y = train_step(x)
    log.emit(y)
    return y


# case: conditional callee with one side handled inside
@fx.uses(temperature)
def pick_handled(x: jax.Array, deterministic: bool) -> jax.Array:
    with noise.seed(0):
        return (scaled if deterministic else noisy)(x)


# case: conditional between jitted and plain, both declared
@fx.uses(temperature)
def pick_compiled(x: jax.Array, compiled: bool) -> jax.Array:
    return (fx.jit(scaled) if compiled else scaled)(x)


# case: overloaded function outside the row
@fx.uses(steps)
def use_scale_missing(x: jax.Array) -> jax.Array:
    return scale(x) + steps.get()  # E: effax-undeclared


# case: overloaded function at module level
y_scale = scale(3.0)  # E: effax-unhandled

# case: conditional callee with one side undeclared
@fx.uses(temperature)
def pick_missing(x: jax.Array, deterministic: bool) -> jax.Array:
    return (scaled if deterministic else noisy)(x)  # E: effax-undeclared


# case: row tuple lacks an effect of the callee
@fx.uses(*MODEL_ROW)
def model_then_train(x: jax.Array) -> jax.Array:
    return train_step(model(x))  # E: effax-undeclared


# case: row tuple lacks an operation's effect
@fx.uses(*TRAIN_ROW)
def step_and_log(x: jax.Array) -> jax.Array:
    y = train_step(x)
    log.emit(y)  # E: effax-undeclared
    return y


# case: conditional between two partially handled callees
@fx.uses(noise)
def pick_compiled_missing(x: jax.Array, compiled: bool) -> jax.Array:
    return (fx.jit(scaled) if compiled else noisy)(x)  # E: effax-undeclared


# case: conditional callee at module level under one handler (a limit before issue 42: now reported from the calls of its `with` statement)
with temperature.provide(jnp.float32(1.0)):
    y_pick = (scaled if bool(jnp.ones(()) > 0) else noisy)(jnp.ones(3))  # E: effax-unhandled: "this call" performs effect "noise"
