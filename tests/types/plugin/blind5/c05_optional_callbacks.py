"""Optional effects (try / contextlib.suppress), and callbacks kept for later."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp

import effax as fx
from b5lib import layers
from b5lib.effects import losses as sink
from b5lib.effects import steps as ticks
from b5lib.effects import temperature as temp

x2 = jnp.array([1.0, -2.0])

# case: an optional temperature read under contextlib.suppress of the unhandled error
with contextlib.suppress(fx.UnhandledEffectError):
    layers.scaled(x2)
print("suppressed")

# case: suppress of a base class of the error
with contextlib.suppress(LookupError):
    layers.scaled(x2)
with contextlib.suppress(fx.EffectError):
    temp.ask()

# case: suppress of an unrelated error does not catch it
with contextlib.suppress(KeyError):
    layers.scaled(x2)  # E: effax-unhandled

# case: suppress of the undeclared error at module level does not catch an unhandled one
with contextlib.suppress(fx.UndeclaredEffectError):
    temp.ask()  # E: effax-unhandled

# case: try/except of the unhandled error around an optional effect
try:
    y = layers.report(x2)
except fx.UnhandledEffectError:
    y = x2
print(y)

# case: try/except of another error
try:
    layers.report(x2)  # E: effax-unhandled
except ValueError:
    pass

# case: inside a row, suppressing the undeclared error of an optional count
@fx.uses(temp)
def maybe_counted(x: jax.Array) -> jax.Array:
    with contextlib.suppress(fx.UndeclaredEffectError):
        ticks.modify(lambda n: n + 1)
    return layers.scaled(x)


@fx.uses(temp)
def wrongly_suppressed(x: jax.Array) -> jax.Array:
    with contextlib.suppress(fx.UnhandledEffectError):
        ticks.modify(lambda n: n + 1)  # E: effax-undeclared
    return layers.scaled(x)


with fx.handlers(temp.provide(jnp.float32(2.0)), ticks.init(jnp.int32(0))):
    print(maybe_counted(x2))
with fx.handlers(temp.provide(jnp.float32(2.0)), ticks.init(jnp.int32(0))):
    wrongly_suppressed(x2)

# case: inside a row, try/except LookupError around a call to a function with a larger row
@fx.uses(temp)
def optional_counted(x: jax.Array) -> jax.Array:
    try:
        return layers.counted(x)
    except LookupError:
        return layers.scaled(x)


with fx.handlers(temp.provide(jnp.float32(2.0)), ticks.init(jnp.int32(0))):
    print(optional_counted(x2))

# case: a compiled optional effect, retraced once a handler appears
@fx.jit
def scaled_or_not(x: jax.Array) -> jax.Array:
    try:
        return x * temp.ask()
    except fx.UnhandledEffectError:
        return x


print(scaled_or_not(x2))
with temp.provide(jnp.float32(3.0)):
    print(scaled_or_not(x2))

# case: callbacks appended to a list and called later with nothing installed
callbacks: list[Callable[[], jax.Array]] = []
callbacks.append(lambda: layers.scaled(x2))
with temp.provide(jnp.float32(1.0)):
    print([cb() for cb in callbacks])
for cb in callbacks:
    cb()  # limit: a function stored in a list is called later

# case: a list written in place and read with a number
readers = [layers.scaled, layers.counted]
with fx.handlers(temp.provide(jnp.float32(1.0)), ticks.init(jnp.int32(0))):
    print(readers[1](x2))

# case: a list written in place and read with a number (the failing use)
readers[0](x2)  # E: effax-unhandled

# case: a tuple of readers written in place, the second needs the State too
reader_pair = (layers.scaled, layers.counted)
with temp.provide(jnp.float32(1.0)):
    print(reader_pair[0](x2))
    reader_pair[1](x2)  # E: effax-unhandled

# case: a dataclass field factory performing an effect when the instance is made
@dataclasses.dataclass
class Run:
    start: jax.Array = dataclasses.field(default_factory=lambda: temp.ask())


with temp.provide(jnp.float32(0.1)):
    print(Run().start)
Run()  # limit: a default_factory is a function stored for later

# case: a defaultdict whose factory reads the temperature
table: collections.defaultdict[str, jax.Array] = collections.defaultdict(lambda: temp.ask())
with temp.provide(jnp.float32(0.2)):
    print(table["a"])
table["b"]  # limit: a defaultdict factory is stored for later

# case: a lambda handed to a function of our own
def call_later(fn: Callable[[], jax.Array]) -> jax.Array:
    return fn()


with temp.provide(jnp.float32(1.0)):
    print(call_later(lambda: layers.scaled(x2)))
call_later(lambda: layers.scaled(x2))  # limit: a lambda given to our own function

# case: builtins that call their function at once
with temp.provide(jnp.float32(2.0)):
    print(list(map(layers.scaled, [x2, x2])))
    print(sorted([1.0, 3.0, 2.0], key=lambda v: v * float(temp.ask())))
    print(functools.reduce(lambda a, b: a + layers.scaled(b), [x2, x2], jnp.zeros(2)))

# case: builtins that call their function at once (the failing use)
list(map(layers.scaled, [x2, x2]))  # E: effax-unhandled

# case: sorted with a key performing the temperature, no provider
sorted([1.0, 3.0], key=lambda v: v * float(temp.ask()))  # E: effax-unhandled

# case: functools.reduce over a function with a row, no provider
functools.reduce(lambda a, b: a + layers.scaled(b), [x2, x2], jnp.zeros(2))  # E: effax-unhandled

# case: jax.tree.map over a function with a row
with temp.provide(jnp.float32(1.0)):
    print(jax.tree.map(layers.scaled, {"a": x2, "b": x2}))

# case: jax.tree.map over a function with a row (the failing use)
jax.tree.map(layers.scaled, {"a": x2})  # E: effax-unhandled

# case: a functools.partial of a function with a row
half_report = functools.partial(layers.report)
with sink.collect():
    half_report(x2)

# case: a functools.partial of a function with a row (the failing use)
half_report(x2)  # E: effax-unhandled

# case: a partial made in another module
with temp.provide(jnp.float32(1.0)):
    print(layers.double_scaled(x2))

# case: a partial made in another module (the failing use)
layers.double_scaled(x2)  # E: effax-unhandled

# case: list.sort with a key reading the temperature, under a provider
weights = [3.0, 1.0, 2.0]
with temp.provide(jnp.float32(-1.0)):
    weights.sort(key=lambda v: v * float(temp.ask()))
print(weights)
