"""Plain functions with effect rows calling each other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import jax
import jax.numpy as jnp

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
steps = fx.State[jax.Array]("steps")
log = fx.Emit[jax.Array]("log")
noise = fx.RandomKey("noise")
mode = fx.Ask[str]("mode", static=True)
bias: fx.Ask[jax.Array] = fx.Ask[jax.Array]("bias")
scale_a: Final = fx.Ask[jax.Array]("scale")
scale_b = fx.Ask[jax.Array]("scale")  # same name, a different effect
temp_alias = temperature


@fx.uses(temperature)
def scaled(x: jax.Array) -> jax.Array:
    return x * temperature.ask()


@fx.uses(temperature, steps)
def counted(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return scaled(x)


@fx.uses(log)
def record(x: jax.Array) -> None:
    log.emit(x)


# case: caller row is a superset
@fx.uses(temperature, steps, log)
def forward_all(x: jax.Array) -> jax.Array:
    y = counted(x)
    record(y)
    return scaled(y) + steps.get()


# case: effect handled inside the function
@fx.uses(temperature)
def forward_counting(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    with steps.init(jnp.int32(0)) as cell:
        y = counted(x)
        steps.set(steps.get() * 2)
    return y, cell.value


# case: pure entry point handles everything
@fx.uses()
def entry(x: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    with fx.handlers(temperature.provide(t), steps.init(jnp.int32(0))) as hs:
        y = counted(x)
    return y, hs[steps]


# case: function without a row is not checked
def unchecked_helper(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return counted(x) * temperature.ask()


# case: row written with an alias of the effect
@fx.uses(temp_alias)
def scaled_via_alias(x: jax.Array) -> jax.Array:
    return scaled(x) + temperature.ask()


# case: annotated and Final declarations
@fx.uses(bias, scale_a)
def affine(x: jax.Array) -> jax.Array:
    return x * scale_a.ask() + bias.ask()


# case: nested def with its own narrower row
@fx.uses(temperature, steps)
def outer_with_inner(x: jax.Array) -> jax.Array:
    @fx.uses(temperature)
    def inner(v: jax.Array) -> jax.Array:
        return v * temperature.ask()

    steps.modify(lambda n: n + 1)
    return inner(x) + steps.get()


# case: factory returns a performing closure without calling it
@fx.uses()
def make_reader(offset: jax.Array) -> Callable[[], jax.Array]:
    def read() -> jax.Array:
        return steps.get() + offset

    return read


# case: static ask in the row
@fx.uses(mode, temperature)
def mode_dependent(x: jax.Array) -> jax.Array:
    if mode.ask() == "train":
        return scaled(x)
    return x


# case: state op outside the row
@fx.uses(temperature)
def sneaky(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)  # E: effax-undeclared
    return scaled(x)


# case: callee needs more than the caller declares
@fx.uses(temperature)
def narrow_caller(x: jax.Array) -> jax.Array:
    return counted(x) * 2  # E: effax-undeclared


# case: emit outside the row
@fx.uses(steps)
def logs_without_row(x: jax.Array) -> jax.Array:
    log.emit(x)  # E: effax-undeclared
    return x + steps.get()


# case: next_key outside the row
@fx.uses(temperature)
def jitter(x: jax.Array) -> jax.Array:
    k = noise.next_key()  # E: effax-undeclared
    return x * temperature.ask() + jax.random.normal(k, x.shape)


# case: used after the handling with block ended
@fx.uses()
def after_block(x: jax.Array) -> jax.Array:
    with steps.init(jnp.int32(0)):
        steps.set(steps.get() + 1)
    return x + steps.get()  # E: effax-undeclared


# case: same name string, different effect
@fx.uses(scale_a)
def wrong_scale(x: jax.Array) -> jax.Array:
    return x * scale_b.ask()  # E: effax-undeclared


# case: pure entry point leaks its callee's effect
@fx.uses()
def leaky_entry(x: jax.Array) -> jax.Array:
    with steps.init(jnp.int32(0)):
        y = counted(x)  # E: effax-undeclared
    return y


# case: innermost row applies to nested def
@fx.uses(temperature, steps)
def outer_strict(x: jax.Array) -> jax.Array:
    @fx.uses(temperature)
    def inner(v: jax.Array) -> jax.Array:
        return v * temperature.ask() + steps.get()  # E: effax-undeclared

    return inner(x)


# case: nested def without a row counts where it is called
@fx.uses(temperature)
def calls_nested(x: jax.Array) -> jax.Array:
    def bump() -> None:
        steps.modify(lambda n: n + 1)

    bump()  # E: effax-undeclared
    return scaled(x)


# case: handler of a same-named effect does not handle the other
@fx.uses()
def wrong_provider(x: jax.Array) -> jax.Array:
    with scale_b.provide(jnp.float32(2.0)):
        return x * scale_a.ask()  # E: effax-undeclared


# case: comprehension calls a rowed function
@fx.uses(steps)
def batch_scaled(xs: list[jax.Array]) -> list[jax.Array]:
    return [scaled(x) for x in xs]  # E: effax-undeclared


# case: static ask outside the row
@fx.uses(temperature)
def mode_missing(x: jax.Array) -> jax.Array:
    if mode.ask() == "eval":  # E: effax-undeclared
        return x
    return scaled(x)


# case: annotated effect outside the row
@fx.uses(scale_a)
def affine_missing(x: jax.Array) -> jax.Array:
    return x * scale_a.ask() + bias.ask()  # E: effax-undeclared
