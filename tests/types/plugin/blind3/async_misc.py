"""Async code, ExitStack, conditional handlers, walrus, handler tuples, closures."""

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import jax
import jax.numpy as jnp

import effax as fx
from fxlib import dropout, losses, lr, scale, steps, temperature, verbose
from fxlib.ops import counted, report, scaled

P = ParamSpec("P")
R = TypeVar("R")
X = jnp.ones(3)

def logged(f: Callable[P, R]) -> Callable[P, R]:
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        print("calling", f.__name__)
        return f(*args, **kwargs)

    return wrapper

# case: an async layer with its row, awaited by an async entry
@fx.uses(temperature)
async def fetch_scaled(x: jax.Array) -> jax.Array:
    await asyncio.sleep(0)
    return scaled(x)

@fx.uses()
async def serve(x: jax.Array) -> jax.Array:
    with temperature.provide(jnp.float32(3.0)):
        return await fetch_scaled(x)

# case: an async layer asking the scale outside its row
@fx.uses(temperature)
async def fetch_both(x: jax.Array) -> jax.Array:
    await asyncio.sleep(0)
    return scaled(x) * scale.ask()  # E: effax-undeclared

# case: a user decorator inside the row decorator keeps the row
@fx.uses(temperature, steps)
@logged
def logged_counted(x: jax.Array) -> jax.Array:
    return counted(x)

# case: handlers entered on an ExitStack; the rest of the block is not reported
@fx.uses()
def stacked(x: jax.Array) -> jax.Array:
    with contextlib.ExitStack() as stack:
        stack.enter_context(temperature.provide(jnp.float32(2.0)))
        stack.enter_context(steps.init(jnp.int32(0)))
        return counted(x)

# case: a conditional handler chosen by a flag
@fx.uses()
def tempered(x: jax.Array, hot: bool) -> jax.Array:
    h = temperature.provide(jnp.float32(10.0)) if hot else temperature.provide(jnp.float32(0.1))
    with h:
        return scaled(x)

# case: handlers kept in a tuple and a typed list, installed together
@fx.uses()
def from_cells(x: jax.Array) -> jax.Array:
    cells = (temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0)))
    more: list[fx.Handler[Any]] = [dropout.seed(0), losses.collect()]
    with fx.handlers(*cells), fx.handlers(*more):
        return counted(x)

# case: an optional effect read in try/except inside an unrowed helper
def maybe_scaled(x: jax.Array) -> jax.Array:
    try:
        return x * scale.ask()
    except fx.UnhandledEffectError:
        return x

# case: a walrus binding a rowed call inside a row that lacks steps
@fx.uses(temperature)
def walrus_count(x: jax.Array) -> jax.Array:
    if (y := counted(x)).sum() > 0:  # E: effax-undeclared
        return y
    return x

# case: a closure factory returning a rowed inner function
def make_scaler(k: float) -> Callable[[jax.Array], jax.Array]:
    @fx.uses(temperature)
    def inner(x: jax.Array) -> jax.Array:
        return k * scaled(x)

    return inner

# case: a nested helper with its own row, called under a row that misses dropout
@fx.uses(temperature)
def outer_with_helper(x: jax.Array) -> jax.Array:
    @fx.uses(dropout)
    def jitter(v: jax.Array) -> jax.Array:
        return v + jax.random.normal(dropout.next_key(), v.shape)

    return jitter(scaled(x))  # E: effax-undeclared

# case: module level: asyncio.run of the pure async entry
print(asyncio.run(serve(X)))

# case: module level: asyncio.run of the async layer with nothing provided
asyncio.run(fetch_scaled(X))  # E: effax-unhandled

# case: module level: ExitStack at module level, then a call after it closed
with contextlib.ExitStack() as stack0:
    stack0.enter_context(temperature.provide(jnp.float32(2.0)))
    print(scaled(X))
after_stack = scaled(X)  # E: effax-unhandled

# case: module level: a walrus reading state with no cell installed
if (n0 := steps.get()) is not None:  # E: effax-unhandled
    print(n0)

# case: module level: defaults answer without handlers
print(lr.ask(), verbose.ask(), report(X).shape, maybe_scaled(X))

# case: module level: a tuple of handlers spread into fx.handlers
cells0 = (temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0)))
with fx.handlers(*cells0) as hs0:
    counted(X)
print(hs0[steps], stacked(X), tempered(X, True), from_cells(X))

# case: module level: the decorated counted function with only steps
with steps.init(jnp.int32(0)):
    logged_counted(X)  # E: effax-unhandled

# case: module level: a closure's returned function under its provider
with temperature.provide(jnp.float32(2.0)):
    print(make_scaler(3.0)(X))

# case: module level: a handler made, but entered for the wrong effect
cell1 = steps.init(jnp.int32(0))
with cell1:
    scaled(X)  # E: effax-unhandled

if __name__ == "__main__":
    # case: main block drives the async and nested wrong cases
    with fx.handlers(temperature.provide(jnp.float32(1.0)), scale.provide(2.0)): asyncio.run(fetch_both(X))
    # case: main block drives walrus_count
    with fx.handlers(temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0))): walrus_count(X)
    # case: main block drives outer_with_helper
    with fx.handlers(temperature.provide(jnp.float32(1.0)), dropout.seed(0)): outer_with_helper(X)
