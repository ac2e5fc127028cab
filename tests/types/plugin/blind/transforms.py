"""effax.jit, grad, vmap, checkpoint, handle and functools.partial carry rows."""

from __future__ import annotations

import functools as ft
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import jax
import jax.numpy as jnp

import effax as fx

P = ParamSpec("P")
R = TypeVar("R")

temperature = fx.Ask[jax.Array]("temperature")
steps = fx.State[jax.Array]("steps")
noise = fx.RandomKey("noise")


def timed(fn: Callable[P, R]) -> Callable[P, R]:
    @ft.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return fn(*args, **kwargs)

    return wrapper


@fx.uses(temperature)
def loss(w: jax.Array) -> jax.Array:
    return jnp.sum((w * temperature.ask()) ** 2)


@fx.uses(noise)
def perturb(x: jax.Array) -> jax.Array:
    return x + fx.random.normal(x.shape, stream=noise)


@fx.uses(temperature, steps)
def step(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return x * temperature.ask()


@fx.uses(temperature)
def scale_by(x: jax.Array, factor: float) -> jax.Array:
    return x * factor * temperature.ask()


@fx.jit
@fx.uses(temperature)
def jitted(x: jax.Array) -> jax.Array:
    return x * temperature.ask()


@timed
@fx.uses(temperature)
def timed_scaled(x: jax.Array) -> jax.Array:
    return x * temperature.ask()


fast_loss = fx.jit(loss)
handled_step = fx.handle(step, steps.init(jnp.int32(0)))
compiled_step = fx.handle(step, transform=jax.jit)
double = ft.partial(scale_by, factor=2.0)


# case: jit inside a matching row
@fx.uses(temperature)
def jit_in_row(w: jax.Array) -> jax.Array:
    return fx.jit(loss)(w) + fast_loss(w)


# case: grad inside a matching row
@fx.uses(temperature)
def grad_in_row(w: jax.Array) -> jax.Array:
    g: jax.Array = fx.grad(loss)(w)
    return w - 0.1 * g


# case: vmap under a local seed
@fx.uses()
def vmap_seeded(xs: jax.Array) -> jax.Array:
    with noise.seed(0):
        return fx.vmap(perturb, keys="split")(xs)


# case: handle removes the handled effect from the row
@fx.uses(temperature)
def handled_in_row(x: jax.Array) -> jax.Array:
    return handled_step(x)


# case: inline handle with a transform
@fx.uses(temperature)
def inline_handle(x: jax.Array) -> jax.Array:
    return fx.handle(step, steps.init(jnp.int32(0)), transform=jax.jit)(x)


# case: partial in a matching row
@fx.uses(temperature)
def partial_in_row(x: jax.Array) -> jax.Array:
    triple = ft.partial(scale_by, factor=3.0)
    return double(x) + triple(x)


# case: decorated jit in a matching row
@fx.uses(temperature, steps)
def decorated_in_row(x: jax.Array) -> jax.Array:
    return jitted(x) + compiled_step(x)


# case: checkpoint and value_and_grad with local handler
@fx.uses()
def remat_loss(w: jax.Array) -> tuple[Any, Any]:
    with temperature.provide(jnp.float32(0.5)):
        y = fx.checkpoint(loss)(w)
        v, g = fx.value_and_grad(loss)(w)
    return y + v, g


# case: unknown decorator hides the row
@fx.uses()
def calls_timed(x: jax.Array) -> jax.Array:
    return timed_scaled(x)  # limit


# case: jit outside the row
@fx.uses(steps)
def jit_missing(w: jax.Array) -> jax.Array:
    return fx.jit(loss)(w)  # E: effax-undeclared


# case: stored jit outside the row
@fx.uses()
def stored_jit_missing(w: jax.Array) -> jax.Array:
    return fast_loss(w)  # E: effax-undeclared


# case: grad outside the row
@fx.uses(noise)
def grad_missing(w: jax.Array) -> jax.Array:
    g: jax.Array = fx.grad(loss)(w)  # E: effax-undeclared
    return perturb(g)


# case: vmap outside the row
@fx.uses(temperature)
def vmap_missing(xs: jax.Array) -> jax.Array:
    return fx.vmap(perturb)(xs) * temperature.ask()  # E: effax-undeclared


# case: handled function still needs the rest
@fx.uses(steps)
def handled_missing(x: jax.Array) -> jax.Array:
    return handled_step(x)  # E: effax-undeclared


# case: handle with the other effect's handler
@fx.uses(temperature)
def handle_wrong_handler(x: jax.Array) -> jax.Array:
    only_temp = fx.handle(step, temperature.provide(jnp.float32(1.0)))
    return only_temp(x)  # E: effax-undeclared


# case: partial outside the row
@fx.uses()
def partial_missing(x: jax.Array) -> jax.Array:
    return double(x)  # E: effax-undeclared


# case: local partial outside the row
@fx.uses(steps)
def local_partial_missing(x: jax.Array) -> jax.Array:
    half = ft.partial(scale_by, factor=0.5)
    return half(x) + steps.get()  # E: effax-undeclared


# case: decorated jit outside the row
@fx.uses(steps)
def decorated_missing(x: jax.Array) -> jax.Array:
    return jitted(x) + steps.get()  # E: effax-undeclared


# case: checkpoint outside the row
@fx.uses(noise)
def checkpoint_missing(w: jax.Array) -> jax.Array:
    return fx.checkpoint(loss)(w)  # E: effax-undeclared


# case: value_and_grad outside the row
@fx.uses(steps)
def value_and_grad_missing(w: jax.Array) -> tuple[Any, Any]:
    return fx.value_and_grad(loss)(w)  # E: effax-undeclared


# case: jit of an inline lambda outside the row
@fx.uses(steps)
def jit_lambda_missing(x: jax.Array) -> jax.Array:
    y: jax.Array = fx.jit(lambda v: v * temperature.ask())(x)  # E: effax-undeclared
    return y + steps.get()


# case: compiled handle outside the row
@fx.uses(temperature)
def compiled_missing(x: jax.Array) -> jax.Array:
    return compiled_step(x)  # E: effax-undeclared


# case: module-level partial call
y_double = double(jnp.ones(3))  # E: effax-unhandled
