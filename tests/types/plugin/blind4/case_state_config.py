"""StateDict, Ask defaults (also through **options), static configuration and handler values."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from optics.effects import bn, clip_at, lr, mode, step_count, temperature, verbose
from optics.layers import activation, running_mean, soften

x = jnp.ones((8, 2))
logits = jnp.array([1.0, 2.0, 3.0])

DEFAULTS: dict[str, Any] = {"default": 0.5}
dropout_rate = fx.Ask[float]("dropout_rate", **DEFAULTS)
STATIC_ONLY: dict[str, Any] = {"static": True}
use_bias = fx.Ask[bool]("use_bias", **STATIC_ONLY)
seq_len: fx.Ask[int] = fx.Ask[int]("seq_len", static=True, default=16)
total = fx.State[float]("total")
label = fx.Ask[str]("label")
levels = fx.Ask[tuple[int, ...]]("levels", static=True)


@dataclasses.dataclass(frozen=True)
class Schedule:
    warmup: int
    milestones: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class LooseSchedule:
    warmup: int
    milestones: list[int]


schedule = fx.Ask[Schedule]("schedule", static=True)
loose = fx.Ask[LooseSchedule]("loose", static=True)


@fx.uses(total)
def accumulate(v: jax.Array) -> jax.Array:
    return total.modify(lambda t: t + jnp.sum(v))  # pyright: ignore[reportReturnType, reportArgumentType]  # E: arg-type, return-value, return-value


@fx.uses(label)
def labelled() -> jax.Array:
    return jnp.float32(len(label.ask()))  # E: no-any-return


# case: StateDict handled at module level, eager and compiled
with bn.init() as cell:
    running_mean("first", x)
    fx.jit(running_mean, static_argnums=0)("first", x)
print(sorted(cell.value))

# case: StateDict get at module level without a handler
bn.get("first/mean", init=jnp.zeros(2))  # E: effax-unhandled

# case: StateDict set at module level without a handler
bn.set("first/mean", jnp.zeros(2))  # E: effax-unhandled

# case: a StateDict row function at module level without a handler
running_mean("layer", x)  # E: effax-unhandled

# case: a StateDict entry read without init= after it was created: fine
with bn.init({"enc/mean": jnp.zeros(2)}):
    bn.get("enc/mean")

# case: a StateDict entry read without init= that does not exist
with bn.init():
    bn.get("dec/mean")  # limit: the plugin does not know which entries exist (EffectUsageError at run time)

# case: StateDict performed in a function whose row omits it
@fx.uses(step_count)
def bn_and_steps(v: jax.Array) -> jax.Array:
    step_count.modify(lambda n: n + 1)
    m = bn.get("stat", init=lambda: jnp.zeros(v.shape[-1]))  # E: effax-undeclared
    return v - m


with bn.init(), step_count.init(jnp.int32(0)):
    bn_and_steps(x)

# case: StateDict handled inside a pure entry point
@fx.uses()
def fresh_stats(v: jax.Array) -> dict[str, jax.Array]:
    with bn.init() as inner:
        running_mean("a", v)
        running_mean("b", v)
    return inner.value


fresh_stats(x)

# case: Ask with a default at module level, directly and through rows
print(temperature.ask(), verbose.ask(), seq_len.ask())
print(soften(logits), fx.jit(soften)(logits))

# case: Ask whose default comes from **options
print(dropout_rate.ask())

# case: **options without a default are taken to hold one
print(use_bias.ask())  # limit: **options are taken to hold a default; this one holds none (UnhandledEffectError)

# case: Ask with a default, omitted from a row, handler installed around the call
@fx.uses(lr)
def hot_update(w: jax.Array) -> jax.Array:
    return w * lr.ask() / temperature.ask()  # E: effax-undeclared


with lr.provide(jnp.float32(0.1)), temperature.provide(2.0):
    hot_update(logits)

# case: Ask with a default, omitted from a row, no handler installed: the default answers
@fx.uses(lr)
def cool_update(w: jax.Array) -> jax.Array:
    return w * lr.ask() / temperature.ask()  # E: effax-undeclared


with lr.provide(jnp.float32(0.1)):
    cool_update(logits)  # the run-time default answers here; the row still omits it
with lr.provide(jnp.float32(0.1)), temperature.provide(0.5):
    cool_update(logits)  # under a handler the row hides it

# case: default static Ask read by a function with a row, compiled at module level
@fx.uses(verbose, seq_len)
def padded(v: jax.Array) -> jax.Array:
    if verbose.ask():
        print("padding to", seq_len.ask())
    return jnp.pad(v, (0, seq_len.ask() - v.shape[0]))


print(fx.jit(padded)(logits).shape)
with seq_len.provide(8):
    print(fx.jit(padded)(logits).shape)

# case: static Ask without default read through a function at module level
activation(logits)  # E: effax-unhandled

# case: static Ask given through a conditional handler, both sides handle it
fast = True
with mode.provide("tanh") if fast else mode.provide("relu"):
    activation(logits)

# case: conditional handler where only one side handles the effect
with mode.provide("tanh") if not fast else clip_at.provide(1.0):
    activation(logits)  # E: effax-unhandled

# case: a static Ask given a tuple holding a list
levels.provide(((1, 2), [3]))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]  # E: effax-handler-type

# case: a static Ask given a hashable tuple
with levels.provide((1, 2, 3)):
    print(levels.ask())

# case: a static Ask given a frozen dataclass of tuples
with schedule.provide(Schedule(warmup=10, milestones=(100, 200))):
    print(schedule.ask())

# case: a static Ask given a frozen dataclass holding a list
with loose.provide(LooseSchedule(warmup=10, milestones=[100, 200])):  # E: effax-handler-type
    print(loose.ask())

# case: a State[float] started from an int, updated in a compiled call
with total.init(0):  # E: effax-handler-type
    fx.jit(accumulate)(logits)

# case: a State[float] started from a float
with total.init(0.0) as tcell:
    fx.jit(accumulate)(logits)
print(tcell.value)

# case: a traced Ask[str] given a str, read only eagerly
with label.provide("train"):
    print(labelled())

# case: a traced Ask[str] given a str, read by a compiled call under it
with label.provide("train"):
    fx.jit(labelled)()  # E: effax-handler-type

# case: a traced Ask[str] given a str to fx.handle with transform=jax.jit
fx.handle(labelled, label.provide("eval"), transform=jax.jit)()  # E: effax-handler-type

# case: clip_at static float given an int: static values need not be floats to hash
with clip_at.provide(1.0):
    print(clip_at.ask())
