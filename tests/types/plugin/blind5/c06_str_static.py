"""Values an effect cannot carry: str Asks and States eager vs compiled, static values, dtypes."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

import effax as fx
from b5lib import effects as ef
from b5lib.effects import NetConfig, LooseConfig
from b5lib.effects import label as run_label
from b5lib.effects import levels as lv
from b5lib.effects import mode as phase
from b5lib.effects import run_tag as tag
from b5lib.effects import total as running_total
from b5lib.layers import accumulate, relabel, tag_length

z = jnp.zeros(3)
o = jnp.ones(3)

# case: a traced str Ask read by eager code only
with tag.provide("run-17"):
    print(tag_length(o), tag.ask())

# case: the traced str Ask read by a compiled call under its provider
with tag.provide("run-17"):
    fx.jit(tag_length)(o)  # E: effax-handler-type

# case: the str provider given to a compiled effax.handle
eager_tagged = fx.handle(tag_length, tag.provide("eager"))
print(eager_tagged(o))

# case: the str provider given to a compiled effax.handle (the failing use)
fx.handle(tag_length, tag.provide("x"), transform=jax.jit)(o)  # E: effax-handler-type

# case: a compiled handled function kept in a variable, called under the str provider
compiled_tagged = fx.jit(tag_length)
with tag.provide("abc"):
    print(tag_length(o))
    compiled_tagged(o)  # E: effax-handler-type

# case: a compiled function that does not read the str Ask, under its provider
@fx.uses(phase)
def phase_scale(x: jax.Array) -> jax.Array:
    return x * (1.0 if phase.ask() == "train" else 0.5)


with tag.provide("unused"), phase.provide("train"):
    print(fx.jit(phase_scale)(o))

# case: a static str Ask crosses a compiled call
with phase.provide("eval"):
    print(fx.jit(phase_scale)(o), fx.handle(phase_scale, transform=jax.jit)(o))

# case: a str State updated eagerly
with run_label.init("exp") as lab:
    relabel("-a")
    relabel("-b")
print(lab.value)

# case: a str State updated inside a compiled call
with run_label.init("exp"):
    fx.jit(relabel)("-c")  # E: effax-handler-type

# case: the str State cell given to a compiled effax.handle
label_cell = run_label.init("exp")
fx.handle(relabel, label_cell, transform=jax.jit)("-d")  # E: effax-handler-type

# case: a static Ask of a list of levels provided with a list
levels_list = fx.Ask[list[int]]("levels_list", static=True)
levels_list.provide([1, 2])  # E: effax-handler-type

# case: a static Ask of a tuple provided with a tuple
with lv.provide((1, 2, 3)):
    print(fx.jit(lambda x: x * len(lv.ask()))(o))

# case: a static Ask of a tuple given a list anyway
lv.provide([1, 2])  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]  # E: effax-handler-type

# case: a frozen config with a tuple inside, static
with ef.net_config.provide(NetConfig(depth=3, widths=(2, 2, 2))):
    print(ef.net_config.ask().depth)

# case: a frozen config holding a list, static
ef.loose_config.provide(LooseConfig(depth=2, widths=[4, 4]))  # E: effax-handler-type

# case: a tuple holding a list, for a static Ask of tuples of objects
pairs = fx.Ask[tuple[object, ...]]("pairs", static=True)
with pairs.provide((1, "a")):
    print(pairs.ask())

# case: a tuple holding a list, for a static Ask of tuples of objects (the failing use)
pairs.provide((1, [2, 3]))  # E: effax-handler-type

# case: a State of floats started from a float and updated compiled
with running_total.init(0.0) as tot:
    fx.jit(accumulate)(o)
print(tot.value)

# case: a State of floats started from an int and updated compiled
with running_total.init(0):  # E: effax-handler-type
    fx.jit(accumulate)(o)

# case: a State of floats started from an int inside a bundle given to effax.handle
fx.handle(accumulate, running_total.init(1), transform=jax.jit)(o)  # E: effax-handler-type

# case: a State of floats from an int, updated in an effax.scan
local_total = fx.State[float]("local_total")


def add_half(c: jax.Array, _: None) -> tuple[jax.Array, None]:
    local_total.set(local_total.get() + 0.5)
    return c, None


with local_total.init(0.0):
    fx.scan(add_half, o, None, length=2)

# case: a State of floats from an int, updated in an effax.scan (the failing use)
with local_total.init(3):  # E: effax-handler-type
    fx.scan(add_half, o, None, length=2)

# case: the traced str Ask read in an effax.cond branch
with tag.provide("abc"):
    print(len(tag.ask()))
    fx.cond(True, lambda: tag_length(o), lambda: o)  # E: effax-handler-type

# case: a str provider installed inside the compiled function is ordinary tracing
@fx.uses()
def tagged_inside(x: jax.Array) -> jax.Array:
    with tag.provide("inside"):
        return tag_length(x)


print(fx.jit(tagged_inside)(o), jax.jit(tagged_inside)(o))

# case: a frozen dataclass option set, hashable, given in a handled function
@dataclasses.dataclass(frozen=True)
class Opts:
    name: str
    sizes: tuple[int, ...]


opts = fx.Ask[Opts]("opts", static=True)


@fx.uses(opts)
def n_sizes(x: jax.Array) -> jax.Array:
    return x * len(opts.ask().sizes)


print(fx.handle(n_sizes, opts.provide(Opts("a", (1, 2))), transform=jax.jit)(o))

# case: a State of floats given an int inside effax.handlers, then updated compiled
with fx.handlers(running_total.init(2), phase.provide("train")):  # E: effax-handler-type
    fx.jit(accumulate)(z)
