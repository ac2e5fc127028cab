"""Classes, properties, constructors, async code, threads, taps, named state, a custom effect."""

from __future__ import annotations

import asyncio
import threading
from typing import Generic, TypeVar

import attrs
import jax
import jax.numpy as jnp

import effax as fx
from b5lib.effects import acts as site
from b5lib.effects import bn as named
from b5lib.effects import steps as clock
from b5lib.effects import temperature as heat
from b5lib.layers import Dense, Thermostat, scaled, tapped

T = TypeVar("T")
u = jnp.array([1.0, 2.0])

# case: a constructor with a row, constructed under its handler and without
class Calibrated:
    @fx.uses(heat)
    def __init__(self, base: jax.Array) -> None:
        self.offset = base * heat.ask()

    @fx.uses(heat)
    def __call__(self, x: jax.Array) -> jax.Array:
        return scaled(x) + self.offset


with heat.provide(jnp.float32(1.0)):
    cal = Calibrated(jnp.float32(0.5))
    print(cal(u))

# case: a constructor with a row, constructed under its handler and without (the failing use)
Calibrated(jnp.float32(0.5))  # E: effax-unhandled

# case: an instance called at module level with no provider
cal(u)  # E: effax-unhandled

# case: a property whose getter has a row
thermo = Thermostat()
with heat.provide(jnp.float32(20.0)):
    print(thermo.reading)

# case: a property whose getter has a row (the failing use)
thermo.reading  # E: effax-unhandled

# case: a subclass calling super().__call__, its row wider
class Counting(Calibrated):
    @fx.uses(heat, clock)
    def __call__(self, x: jax.Array) -> jax.Array:
        clock.modify(lambda n: n + 1)
        return super().__call__(x)


with fx.handlers(heat.provide(jnp.float32(1.0)), clock.init(jnp.int32(0))):
    print(Counting(jnp.float32(0.0))(u))

# case: a subclass whose row omits what super().__call__ performs
class Narrow(Calibrated):
    @fx.uses(clock)
    def __call__(self, x: jax.Array) -> jax.Array:
        clock.modify(lambda n: n + 1)
        return super().__call__(x)  # E: effax-undeclared


with fx.handlers(heat.provide(jnp.float32(1.0)), clock.init(jnp.int32(0))):
    narrow = Narrow(jnp.float32(0.0))
    narrow(u)

# case: type(self)(...) inside a method with a row
class Ladder:
    @fx.uses(clock)
    def __init__(self, depth: int) -> None:
        clock.modify(lambda n: n + 1)
        self.depth = depth

    @fx.uses(clock)
    def grow(self) -> Ladder:
        return type(self)(self.depth + 1)

    @fx.uses()
    def grow_alone(self) -> Ladder:
        return type(self)(self.depth + 1)  # E: effax-undeclared


with clock.init(jnp.int32(0)) as ladder_clock:
    print(Ladder(1).grow().depth)
print(ladder_clock.value)
with clock.init(jnp.int32(0)):
    Ladder(1).grow_alone()

# case: a generic buffer whose push has a row
class Buffer(Generic[T]):
    def __init__(self) -> None:
        self.items: list[T] = []

    @fx.uses(clock)
    def push(self, item: T) -> None:
        clock.modify(lambda n: n + 1)
        self.items.append(item)


with clock.init(jnp.int32(0)):
    Buffer[int]().push(1)

# case: a generic buffer whose push has a row (the failing use)
Buffer[int]().push(2)  # E: effax-unhandled

# case: an attribute holding a layer, called Equinox-style
class Model:
    def __init__(self) -> None:
        self.body = Dense(2)

    @fx.uses(fx.rng)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.body(x)  # E: effax-undeclared


from b5lib.effects import dropout as dk  # noqa: E402

with fx.handlers(fx.rng.seed(0), dk.seed(0), clock.init(jnp.int32(0))):
    Model()(u)

# case: an async function with a row, run under its handler and without
@fx.uses(heat)
async def fetch_scaled(x: jax.Array) -> jax.Array:
    await asyncio.sleep(0)
    return scaled(x)


with heat.provide(jnp.float32(2.0)):
    print(asyncio.run(fetch_scaled(u)))

# case: an async function with a row, run under its handler and without (the failing use)
asyncio.run(fetch_scaled(u))  # E: effax-unhandled

# case: an async entry point handling inside, awaiting a function with a wider row
@fx.uses(clock)
async def tick_then_fetch(x: jax.Array) -> jax.Array:
    clock.modify(lambda n: n + 1)
    return await fetch_scaled(x)  # E: effax-undeclared


@fx.uses(clock)
async def tick_then_fetch_ok(x: jax.Array) -> jax.Array:
    clock.modify(lambda n: n + 1)
    with heat.provide(jnp.float32(3.0)):
        return await fetch_scaled(x)


with clock.init(jnp.int32(0)):
    print(asyncio.run(tick_then_fetch_ok(u)))
with fx.handlers(clock.init(jnp.int32(0)), heat.provide(jnp.float32(1.0))):
    asyncio.run(tick_then_fetch(u))

# case: a thread target that performs an effect, the handlers of the main thread not reaching it
def worker(out: list[jax.Array]) -> None:
    out.append(heat.ask())  # limit: a thread's target is a function stored for later


results: list[jax.Array] = []
with heat.provide(jnp.float32(1.0)):
    th = threading.Thread(target=worker, args=(results,))
    th.start()
    th.join()
print(len(results))

# case: a thread that installs its own provider
def worker_ok(out: list[jax.Array]) -> None:
    with heat.provide(jnp.float32(4.0)):
        out.append(scaled(u))


th2 = threading.Thread(target=worker_ok, args=(results,))
th2.start()
th2.join()
print(len(results))

# case: taps recorded by pattern: a non-matching site still handled
with site.record("block0/out") as rec:
    tapped(u)
print(list(rec.value))
with site.ignore():
    print(fx.jit(tapped)(u))

# case: taps recorded by pattern: a non-matching site still handled (the failing use)
tapped(u)  # E: effax-unhandled

# case: taps replaced through effax.handle, and gradients of taps
patched = fx.handle(tapped, site.replace({"block0/hidden": jnp.zeros(2)}))
print(patched(u))
with site.gradients() as grads:
    fx.grad(lambda x: jnp.sum(tapped(x)))(u)
print(sorted(grads.value))

# case: a tap in a function whose row omits it
@fx.uses(heat)
def warm_tapped(x: jax.Array) -> jax.Array:
    return tapped(scaled(x))  # E: effax-undeclared


with fx.handlers(heat.provide(jnp.float32(1.0)), site.ignore()):
    warm_tapped(u)

# case: named state created on first use, compiled
@fx.uses(named)
def running_mean(x: jax.Array) -> jax.Array:
    mean = named.get("mean", init=lambda: jnp.zeros(x.shape[-1]))
    named.set("mean", 0.9 * mean + 0.1 * x)
    return x - mean


with named.init() as cell:
    for _ in range(2):
        fx.jit(running_mean)(u)
print(cell.value["mean"])

# case: named state created on first use, compiled (the failing use)
running_mean(u)  # E: effax-unhandled

# case: named state read in a function whose row lacks it
@fx.uses(clock)
def sneaky_mean(x: jax.Array) -> jax.Array:
    clock.modify(lambda n: n + 1)
    return x - named.get("mean", init=jnp.zeros(2))  # E: effax-undeclared


with fx.handlers(clock.init(jnp.int32(0)), named.init()):
    sneaky_mean(u)

# case: a custom effect with a typed handler maker
@attrs.define(eq=False)
class Gauge(fx.Handler["Meter"]):
    effect: Meter
    total: jax.Array = attrs.field(factory=lambda: jnp.float32(0))
    fields = fx.Fields(carry="total")

    def add(self, amount: jax.Array) -> None:
        self.effect.check_store(self, amount)
        self.total = self.total + amount

    @property
    def value(self) -> jax.Array:
        return self.total

    @classmethod
    def rebuild(cls, effect: Meter, static: object, const: object, carry: jax.Array) -> Gauge:
        return cls(effect, carry)


class Meter(fx.Effect[Gauge]):
    operations = ("add",)

    def add(self, amount: jax.Array) -> None:
        self.handler().add(amount)

    def gauge(self) -> Gauge:
        return Gauge(self)


meter = Meter("meter")


@fx.uses(meter)
def spend(x: jax.Array) -> jax.Array:
    meter.add(jnp.sum(x))
    return x


with meter.gauge() as gauge:
    spend(u)
    fx.jit(spend)(u)
print(gauge.value)

# case: a custom effect with a typed handler maker (the failing use)
spend(u)  # E: effax-unhandled

# case: the custom effect intercepted with a forwarding function, gauge missing
with fx.intercept(meter, add=lambda outer, a: outer.add(2 * a)):
    spend(u)  # E: effax-unhandled
with meter.gauge() as gauge2, fx.intercept(meter, add=lambda outer, a: outer.add(2 * a)):
    spend(u)
print(gauge2.value)

# case: cls(...)(x) in a classmethod with a row
class Scaler:
    def __init__(self, k: float) -> None:
        self.k = k

    @fx.uses(heat)
    def __call__(self, x: jax.Array) -> jax.Array:
        return scaled(x) * self.k

    @classmethod
    @fx.uses(heat)
    def apply_default(cls, x: jax.Array) -> jax.Array:
        return cls(2.0)(x)


with heat.provide(jnp.float32(1.0)):
    print(Scaler.apply_default(u))

# case: cls(...)(x) in a classmethod with a row (the failing use)
Scaler(3.0)(u)  # E: effax-unhandled
