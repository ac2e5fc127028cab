"""A custom Meter effect: its handler, interceptors (functions and subclasses) and metering a simulation."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import log, steps
from b9lib.layers import count
from b9lib.meter import Clipped, Frozen, Gauge, Meter, cost, energy

positions = jnp.linspace(0.0, 1.0, 5)

# case: metering a simulation step


@fx.uses(energy)
def move(x: jax.Array, v: jax.Array) -> jax.Array:
    energy.add(0.5 * jnp.sum(v**2))
    return x + v


with energy.gauge() as g:
    move(positions, jnp.ones(5) * 0.1)
    fx.jit(move)(positions, jnp.ones(5) * 0.2)
spent = g.value

# case: metering with no gauge

move(positions, jnp.ones(5))  # E: effax-unhandled

# case: a handler constructed from its class

with Gauge(energy) as g2:
    move(positions, jnp.ones(5))

# case: a gauge of the other meter

with cost.gauge():
    move(positions, jnp.ones(5))  # E: effax-unhandled

# case: meter read inside a row that lacks it


@fx.uses(energy)
def budget_left(limit: float) -> jax.Array:
    return limit - energy.read() - cost.read()  # E: effax-undeclared


with energy.gauge(), cost.gauge():
    budget_left(10.0)

# case: metering in a scan


@fx.uses(energy, steps)
def sim_step(x: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    count()
    return move(x, v), jnp.sum(x)


with energy.gauge() as sg, steps.init(jnp.int32(0)):
    fx.scan(sim_step, positions, jnp.ones((3, 5)) * 0.1)

# case: the scan without a step counter

with energy.gauge():
    fx.scan(sim_step, positions, jnp.ones((3, 5)) * 0.1)  # E: effax-unhandled

# case: an interceptor function scaling every add

tenfold = fx.intercept(energy, add=lambda outer, a: outer.add(10 * a))
with energy.gauge() as tg, tenfold:
    move(positions, jnp.ones(5))

# case: the scaling interceptor with nothing outside

with tenfold:
    move(positions, jnp.ones(5))  # E: effax-unhandled

# case: an interceptor function answering reads alone

zero_reader = fx.intercept(energy, read=lambda outer: jnp.float32(0))
with zero_reader:
    energy.read()

# case: clipped subclass forwarding to the gauge

with energy.gauge() as cg, Clipped(energy, 0.25):
    move(positions, jnp.ones(5))
    fx.jit(move)(positions, jnp.ones(5))

# case: clipped subclass with no gauge outside

with Clipped(energy, 0.25):
    move(positions, jnp.ones(5))  # E: effax-unhandled

# case: frozen subclass answering alone

with Frozen(energy, ()):
    move(positions, jnp.ones(5))

# case: interceptors chained in a bundle after the gauge

with fx.handlers(energy.gauge(), Clipped(energy, 1.0), tenfold) as bh:
    move(positions, jnp.ones(5))
chained_total = bh[energy]

# case: an interceptor before the gauge in a bundle

with fx.handlers(tenfold, cost.gauge()):
    move(positions, jnp.ones(5))  # E: effax-unhandled

# case: handle with a gauge and an interceptor

metered_move = fx.handle(move, energy.gauge(), Clipped(energy, 0.5))
metered_move(positions, jnp.ones(5))

# case: handle with only a forwarding interceptor

clipped_move = fx.handle(move, Clipped(energy, 0.5))
clipped_move(positions, jnp.ones(5))  # E: effax-unhandled

# case: an interceptor logging each add to a collector


def add_and_log(outer: Gauge, a: jax.Array) -> None:
    log.emit(1.0)
    outer.add(a)


logging_meter = fx.intercept(energy, add=add_and_log)
with log.collect() as lc, energy.gauge(), logging_meter:
    move(positions, jnp.ones(5))

# case: the logging interceptor with the collector inside it

with energy.gauge(), logging_meter, log.collect():
    move(positions, jnp.ones(5))  # E: effax-unhandled

# case: a local Interceptor subclass that counts adds in a state


class CountingMeter(fx.Interceptor[Meter]):
    def add(self, amount: jax.Array | float) -> None:
        steps.modify(lambda n: n + 1)
        self.outer().add(amount)


with steps.init(jnp.int32(0)) as kc, energy.gauge(), CountingMeter(energy, ()):
    energy.add(0.5)
    energy.add(1.5)

# case: counting subclass without the state

with energy.gauge(), CountingMeter(energy, ()):
    energy.add(0.5)  # E: effax-unhandled

# case: a counting subclass installed inside a rowed function


@fx.uses(energy)
def metered_twice(x: jax.Array) -> jax.Array:
    with CountingMeter(energy, ()):
        return move(move(x, x), x)  # E: effax-undeclared


with steps.init(jnp.int32(0)), energy.gauge():
    metered_twice(positions)

# case: an unannotated handler maker

with energy.loose() as lg:  # E: no-untyped-call
    move(positions, jnp.ones(5))

# case: an unannotated maker for the wrong meter

with cost.loose():  # E: no-untyped-call
    move(positions, jnp.ones(5))  # limit: a handler maker without a return annotation may handle anything

# case: an interceptor made by a helper function


def prefixed(effect: Meter, factor: float) -> fx.Interceptor[Meter]:
    return fx.intercept(effect, add=lambda outer, a: outer.add(factor * a))


with energy.gauge(), prefixed(energy, 3.0):
    move(positions, jnp.ones(5))

# case: a helper's interceptor with nothing outside

with prefixed(energy, 3.0):
    move(positions, jnp.ones(5))  # limit: an interceptor returned by a function of yours may answer alone or forward

# case: meter in a method with a row and a property


class Battery:
    @fx.uses(energy)
    def __init__(self, capacity: float) -> None:
        self.capacity = capacity
        energy.add(0.0)

    @property
    @fx.uses(energy)
    def charge(self) -> jax.Array:
        return self.capacity - energy.read()

    @fx.uses(energy)
    def drain(self, amount: float) -> None:
        energy.add(amount)


with energy.gauge():
    battery = Battery(5.0)
    battery.drain(1.5)
    level = battery.charge

# case: battery constructed with no gauge

Battery(3.0)  # E: effax-unhandled

# case: battery charge read outside the gauge

with energy.gauge():
    b2 = Battery(2.0)
b2.charge  # E: effax-unhandled

# case: battery drain from a row without the meter


@fx.uses(cost)
def drain_and_bill(b: Battery) -> None:
    b.drain(1.0)  # E: effax-undeclared
    cost.add(1.0)


with energy.gauge(), cost.gauge():
    drain_and_bill(battery)
