"""Custom effects written against the handler protocol."""

from typing import Any

import attrs
import jax
import jax.numpy as jnp

import effax as fx

class Counter(fx.Effect["Tally"]):
    """Counts events; the tally is an int32 array carried through traced regions."""

    def tick(self, by: int = 1) -> None:
        tally = self.handler()
        tally.count = tally.count + by

    def tally(self) -> "Tally":
        return Tally(self)

@attrs.define(eq=False)
class Tally(fx.Handler[Counter]):
    effect: Counter
    count: jax.Array = attrs.field(factory=lambda: jnp.int32(0))
    fields = fx.Fields(carry="count")

    @property
    def value(self) -> jax.Array:
        return self.count

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: Any, carry: Any) -> "Tally":
        return cls(effect, carry)

class Meter(fx.Effect["Gauge"]):
    operations = ("add",)

    def add(self, amount: jax.Array | float) -> None:
        self.handler().add(amount)

    def gauge(self) -> "Gauge":
        return Gauge(self)

@attrs.define(eq=False)
class Gauge(fx.Handler[Meter]):
    effect: Meter
    total: jax.Array = attrs.field(factory=lambda: jnp.float32(0))
    fields = fx.Fields(carry="total")

    def add(self, amount: jax.Array | float) -> None:
        self.effect.check_store(self, amount)
        self.total = self.total + amount

    @property
    def value(self) -> jax.Array:
        return self.total

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: Any, carry: Any) -> "Gauge":
        return cls(effect, carry)

events = Counter("events")
energy = Meter("energy")

# case: a worker ticks its counter, declared in its row
@fx.uses(events)
def work(x: jax.Array) -> None:
    events.tick()
    fx.cond(x > 0, lambda: events.tick(10), lambda: None)

# case: a worker that meters energy but declares only events
@fx.uses(events)
def metered_work(x: jax.Array) -> jax.Array:
    events.tick()
    energy.add(jnp.sum(x))  # E: effax-undeclared
    return x

# case: handles the counter inside with the annotated maker
@fx.uses()
def count_work(x: jax.Array) -> jax.Array:
    with events.tally() as t:
        work(x)
        fx.jit(work)(x)
    return t.value

# case: a gauge handler made by its class, used in with
@fx.uses()
def measured(x: jax.Array) -> jax.Array:
    with Gauge(energy) as g:
        energy.add(jnp.sum(x))
    return g.value

# case: an interceptor of the meter does not handle it
@fx.uses()
def boosted(x: jax.Array) -> None:
    with fx.intercept(energy, add=lambda outer, a: outer.add(10 * a)):
        energy.add(jnp.sum(x))  # E: effax-undeclared

# case: an interceptor inside a gauge forwards to it
@fx.uses()
def boosted_ok(x: jax.Array) -> jax.Array:
    with energy.gauge() as g, fx.intercept(energy, add=lambda outer, a: outer.add(10 * a)):
        energy.add(jnp.sum(x))
    return g.value

# case: module level: the worker run without a tally
work(jnp.float32(1.0))  # E: effax-unhandled

if __name__ == "__main__":
    # case: main block drives the custom effects
    with events.tally() as tally0, energy.gauge() as gauge0:
        work(jnp.float32(1.0))
        metered_work(jnp.ones(3))
    print(tally0.value, gauge0.value, count_work(jnp.float32(1.0)), measured(jnp.ones(2)))
    # case: main block drives boosted under a gauge
    with energy.gauge(): boosted(jnp.ones(2))
    print(boosted_ok(jnp.ones(2)))
    # case: ticking at module level with no tally installed
    events.tick()  # E: effax-unhandled
