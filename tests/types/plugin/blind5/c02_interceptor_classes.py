"""fx.Interceptor subclasses, from a helper module and local ones."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b5lib import intercepts
from b5lib.effects import dropout as stream
from b5lib.effects import losses as emitted
from b5lib.effects import steps as tally
from b5lib.effects import temperature as heat
from b5lib.intercepts import Capped, CountedDraws, Hotter, Pinned
from b5lib.layers import Dense, noisy, report, scaled

v4 = jnp.linspace(0.0, 1.0, 4)

# case: a forwarding subclass with a provider outside it, eager and compiled
with heat.provide(jnp.float32(1.5)), Hotter(heat, ()):
    print(scaled(v4), fx.jit(scaled)(v4))

# case: the forwarding subclass alone
with Hotter(heat, ()):
    scaled(v4)  # E: effax-unhandled

# case: an answering subclass handles the effect by itself
with Pinned(heat, ()):
    print(scaled(v4), fx.jit(scaled)(v4))

# case: a subclass of an answering subclass still answers
class PinnedLow(Pinned):
    """Inherits the answering ask."""


with PinnedLow(heat, ()):
    print(scaled(v4))

# case: a local subclass overriding ask to forward, installed with nothing outside
class Warmer(Pinned):
    def ask(self) -> jax.Array:
        return self.outer().ask() + 1.0


with heat.provide(jnp.float32(0.0)), Warmer(heat, ()):
    print(scaled(v4))

# case: a local subclass overriding ask to forward, installed with nothing outside (the failing use)
with Warmer(heat, ()):
    scaled(v4)  # E: effax-unhandled

# case: a key interceptor class performing the steps State, with the State outside it
with fx.handlers(tally.init(jnp.int32(0)), stream.seed(0)) as hs, CountedDraws(stream, ()):
    noisy(v4)
    fx.jit(noisy)(v4)
print(hs[tally])

# case: the key interceptor class without the State outside it
with stream.seed(0), CountedDraws(stream, ()):
    noisy(v4)  # E: effax-unhandled

# case: the key interceptor class constructed through its module, kept in a variable
counted_draws = intercepts.CountedDraws(stream, ())
with stream.seed(1), counted_draws:
    fx.jit(noisy)(v4)  # E: effax-unhandled
with tally.init(jnp.int32(0)), stream.seed(1), counted_draws:
    fx.jit(noisy)(v4)

# case: a parameterised subclass capping emitted values
with emitted.collect() as col, Capped(emitted, 0.5):
    report(v4)
    report(v4 * 3)
print(col.values)

# case: a parameterised subclass capping emitted values (the failing use)
with Capped(emitted, 0.5):
    report(v4)  # E: effax-unhandled

# case: a subclass constructed inside a function whose row lacks the State it performs
@fx.uses(stream, tally)
def dense_twice(x: jax.Array) -> jax.Array:
    layer = Dense(4)
    with CountedDraws(stream, ()):
        return layer(layer(x))


@fx.uses(stream)
def sample_only(x: jax.Array) -> jax.Array:
    with CountedDraws(stream, ()):
        return noisy(x)  # E: effax-undeclared


with fx.handlers(stream.seed(2), tally.init(jnp.int32(0))) as dense_hs:
    dense_twice(v4)
print(dense_hs[tally])
with fx.handlers(stream.seed(2), tally.init(jnp.int32(0))):
    sample_only(v4)

# case: a local subclass whose operation emits into another effect, collected outside
class Logged(fx.Interceptor[fx.Ask[jax.Array]]):
    def ask(self) -> jax.Array:
        t = self.outer().ask()
        emitted.emit(t)
        return t


with fx.handlers(emitted.collect(), heat.provide(jnp.float32(2.0))) as logged_hs, Logged(heat, ()):
    scaled(v4)
    fx.jit(scaled)(v4)
print(len(logged_hs[emitted]))

# case: the logging subclass with the provider but no collector
with heat.provide(jnp.float32(2.0)), Logged(heat, ()):
    scaled(v4)  # E: effax-unhandled

# case: the logging subclass with the collector but no provider
with emitted.collect(), Logged(heat, ()):
    fx.jit(scaled)(v4)  # E: effax-unhandled

# case: an answering class in a bundle given to effax.handle, nothing around the call
pinned_scaled = fx.handle(scaled, Pinned(heat, ()))
print(pinned_scaled(v4))
hot_scaled = fx.handle(scaled, Hotter(heat, ()))
with heat.provide(jnp.float32(1.0)):
    print(hot_scaled(v4))

# case: an answering class in a bundle given to effax.handle, nothing around the call (the failing use)
hot_scaled(v4)  # E: effax-unhandled

# case: an answering subclass that still performs another effect in its operation
class CountingPin(fx.Interceptor[fx.Ask[jax.Array]]):
    def ask(self) -> jax.Array:
        tally.modify(lambda n: n + 1)
        return jnp.float32(1.0)  # E: no-any-return


with tally.init(jnp.int32(0)) as pin_count, CountingPin(heat, ()):
    scaled(v4)
    scaled(v4)
print(pin_count.value)

# case: an answering subclass that still performs another effect in its operation (the failing use)
with CountingPin(heat, ()):
    scaled(v4)  # E: effax-unhandled

# case: an interceptor held in a variable, inside a function with a full row
@fx.uses(heat)
def hotter_twice(x: jax.Array) -> jax.Array:
    h = Hotter(heat, ())
    with h:
        y = scaled(x)
    with h:
        return y + scaled(x)


with heat.provide(jnp.float32(1.0)):
    print(hotter_twice(v4), fx.jit(hotter_twice)(v4))

# case: a pure entry point installing the answering interceptor itself
@fx.uses()
def pinned_entry(x: jax.Array) -> jax.Array:
    with Pinned(heat, ()):
        return scaled(x)


@fx.uses()
def hotter_entry(x: jax.Array) -> jax.Array:
    with Hotter(heat, ()):
        return scaled(x)  # E: effax-undeclared


print(pinned_entry(v4), jax.jit(pinned_entry)(v4))
with heat.provide(jnp.float32(1.0)):
    hotter_entry(v4)
