"""Installing handlers: with statements, handler variables, ExitStack, own managers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax
import jax.numpy as jnp

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
steps = fx.State[jax.Array]("steps")
log = fx.Emit[jax.Array]("log")
debug_log = fx.Emit[jax.Array]("debug_log")
noise = fx.RandomKey("noise")


@fx.uses(temperature)
def scaled(x: jax.Array) -> jax.Array:
    return x * temperature.ask()


@fx.uses(temperature, steps)
def counted(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return scaled(x)


def install_defaults(stack: contextlib.ExitStack, t: jax.Array) -> None:
    stack.enter_context(temperature.provide(t))
    stack.enter_context(steps.init(jnp.int32(0)))


@contextlib.contextmanager
def default_env(t: jax.Array) -> Iterator[None]:
    with fx.handlers(temperature.provide(t), steps.init(jnp.int32(0))):
        yield


@contextlib.contextmanager
def temperature_only(t: jax.Array) -> Iterator[None]:
    with temperature.provide(t):
        yield


# case: handler held in a variable
@fx.uses(temperature)
def with_cell_variable(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    cell = steps.init(jnp.int32(0))
    with cell:
        y = counted(x)
    return y, cell.value


# case: handlers object held in a variable
@fx.uses()
def with_handlers_variable(x: jax.Array, t: jax.Array) -> jax.Array:
    hs = fx.handlers(temperature.provide(t), steps.init(jnp.int32(0)))
    with hs:
        y = counted(x)
    return y + hs[steps]


# case: several handlers in one with statement
@fx.uses()
def multi_item(x: jax.Array, t: jax.Array) -> jax.Array:
    with temperature.provide(t), steps.init(jnp.int32(0)) as cell:
        y = counted(x)
    return y + cell.value


# case: nested with statements
@fx.uses()
def nested_withs(x: jax.Array, t: jax.Array) -> jax.Array:
    with temperature.provide(t):
        a = scaled(x)
        with steps.init(jnp.int32(0)):
            b = counted(a)
    return b


# case: ExitStack entered directly
@fx.uses()
def exitstack_direct(x: jax.Array, t: jax.Array) -> jax.Array:
    with contextlib.ExitStack() as stack:
        stack.enter_context(temperature.provide(t))
        return scaled(x)


# case: ExitStack filled by a helper
@fx.uses()
def exitstack_helper(x: jax.Array, t: jax.Array) -> jax.Array:
    with contextlib.ExitStack() as stack:
        install_defaults(stack, t)
        return counted(x)


# case: own context manager installs the handlers
@fx.uses()
def own_manager(x: jax.Array, t: jax.Array) -> jax.Array:
    with default_env(t):
        return counted(x)


# case: collect and discard handle emits
@fx.uses()
def emits_handled(x: jax.Array) -> list[jax.Array]:
    with log.collect() as collected, debug_log.discard():
        log.emit(x)
        debug_log.emit(x * 2)
    return collected.value


# case: seeded key stream
@fx.uses()
def seeded_noise(x: jax.Array) -> jax.Array:
    with noise.seed(0):
        return x + jax.random.normal(noise.next_key(), x.shape)


# case: handlers given as a starred list
@fx.uses()
def starred_cells(x: jax.Array, t: jax.Array) -> jax.Array:
    cells = [steps.init(jnp.int32(0))]
    with fx.handlers(*cells, temperature.provide(t)):
        return counted(x)


# case: handler entered by hand
@fx.uses()
def entered_by_hand(x: jax.Array, t: jax.Array) -> jax.Array:
    provider = temperature.provide(t)
    provider.__enter__()
    try:
        return scaled(x)
    finally:
        provider.__exit__(None, None, None)


# case: handler created but never entered
@fx.uses(temperature)
def not_entered(x: jax.Array) -> jax.Array:
    cell = steps.init(jnp.int32(0))
    y = counted(x)  # E: effax-undeclared
    return y + cell.value


# case: fx.handlers misses one effect
@fx.uses()
def handlers_missing(x: jax.Array, t: jax.Array) -> jax.Array:
    with fx.handlers(temperature.provide(t)):
        return counted(x)  # E: effax-undeclared


# case: collector of another emit
@fx.uses(log)
def wrong_collector(x: jax.Array) -> None:
    with log.collect():
        debug_log.emit(x)  # E: effax-undeclared


# case: seed of the wrong stream
@fx.uses()
def wrong_seed(x: jax.Array) -> jax.Array:
    with fx.rng.seed(0):
        return x + jax.random.normal(noise.next_key(), x.shape)  # E: effax-undeclared


# case: used before the ExitStack enters the handler
@fx.uses()
def exitstack_too_early(x: jax.Array, t: jax.Array) -> jax.Array:
    with contextlib.ExitStack() as stack:
        y = scaled(x)  # E: effax-undeclared
        stack.enter_context(temperature.provide(t))
        return y + scaled(x)


# case: used after the ExitStack closed
@fx.uses()
def exitstack_closed(x: jax.Array, t: jax.Array) -> jax.Array:
    with contextlib.ExitStack() as stack:
        stack.enter_context(temperature.provide(t))
        y = scaled(x)
    return y + scaled(x)  # E: effax-undeclared


# case: ExitStack entered the wrong handler
@fx.uses()
def exitstack_wrong(x: jax.Array, t: jax.Array) -> jax.Array:
    with contextlib.ExitStack() as stack:
        stack.enter_context(temperature.provide(t))
        return counted(x)  # limit


# case: own context manager lacks a handler
@fx.uses()
def own_manager_short(x: jax.Array, t: jax.Array) -> jax.Array:
    with temperature_only(t):
        return counted(x)  # limit


# case: used after own context manager closed
@fx.uses()
def own_manager_after(x: jax.Array, t: jax.Array) -> jax.Array:
    with default_env(t):
        y = counted(x)
    return y + scaled(x)  # E: effax-undeclared


# case: handler variable entered for a different effect
@fx.uses(temperature)
def wrong_cell(x: jax.Array) -> jax.Array:
    provider = temperature.provide(jnp.float32(1.0))
    with provider:
        return counted(x)  # E: effax-undeclared


# case: module level handler variable
module_cell = steps.init(jnp.int32(0))
with module_cell, temperature.provide(jnp.float32(1.0)):
    y_module = counted(jnp.ones(3))

# case: module level fx.handlers misses an effect
with fx.handlers(steps.init(jnp.int32(0))):
    y_module_bad = counted(jnp.ones(3))  # E: effax-unhandled
