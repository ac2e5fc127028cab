"""Effects of one's own: a budget from the helper package and a local clock."""

from __future__ import annotations

from collections.abc import Collection
from typing import Generic, TypeVar

import attrs
import jax
import jax.numpy as jnp

import effax as fx
from b6lib.budget import Budget, Wallet, compute
from b6lib.effects import init_key, losses
from b6lib.layers import report

T = TypeVar("T")


class Clock(fx.Effect["Ticker"]):
    """Simulated time: `advance` moves it, `now` reads it."""

    operations = ("advance",)

    def __init__(self, name: str) -> None:
        self.name = name

    def advance(self, dt: float | jax.Array) -> None:
        self.handler().advance(dt)

    @property
    def now(self) -> jax.Array:
        return self.handler().t

    def ticker(self, start: float = 0.0) -> Ticker:
        return Ticker(self, jnp.float32(start))


@attrs.define(eq=False)
class Ticker(fx.Handler[Clock]):
    effect: Clock
    t: jax.Array = attrs.field(factory=lambda: jnp.float32(0.0))
    fields = fx.Fields(carry="t")

    def advance(self, dt: float | jax.Array) -> None:
        self.effect.check_store(self, dt)
        self.t = self.t + dt

    @property
    def value(self) -> jax.Array:
        return self.t

    @classmethod
    def rebuild(cls, effect: Clock, static: object, const: object, carry: jax.Array) -> Ticker:
        return cls(effect, carry)


clock = Clock("clock")


@fx.uses(compute)
def costly(x: jax.Array) -> jax.Array:
    compute.spend(jnp.sum(jnp.abs(x)))
    return jnp.tanh(x)


@fx.uses(clock, compute)
def simulate(x: jax.Array, dt: float = 0.1) -> jax.Array:
    clock.advance(dt)
    return costly(x) * clock.now


# case: the budget's handler maker (annotated) around eager and compiled calls
with compute.wallet(10.0) as wallet:
    y = costly(jnp.ones(3))
    y_jit = fx.jit(costly)(jnp.ones(3))
    left = compute.left()
with Wallet(compute) as direct_wallet:
    fx.scan(lambda c, x: (costly(c), None), jnp.ones(2), None, length=3)

# case: spending with no wallet installed
y_bad = costly(jnp.ones(3))  # E: effax-unhandled
left_bad = compute.left()  # E: effax-unhandled
with clock.ticker():
    sim_bad = simulate(jnp.ones(2))  # E: effax-unhandled

# case: both custom effects handled; the clock read through its property
with clock.ticker(1.0) as ticks, compute.wallet() as budget:
    sim = fx.jit(simulate)(jnp.ones(2))
    sim_scan, _ = fx.scan(lambda c, _: (simulate(c), clock.now), jnp.ones(2), None, length=4)
    now = clock.now

# case: the clock's property read at module level with no ticker
now_bad = clock.now  # E: effax-unhandled
with compute.wallet():
    stamp = float(clock.now)  # E: effax-unhandled


# case: a function whose row lacks the budget calls the spending layer
@fx.uses(clock)
def timed(x: jax.Array) -> jax.Array:
    clock.advance(1.0)
    return costly(x)  # E: effax-undeclared


with clock.ticker(), compute.wallet():
    timed_out = timed(jnp.ones(2))


# case: an interceptor of the custom operation doubling each spend, over a wallet
doubled = fx.intercept(compute, spend=lambda outer, amount: outer.spend(2 * amount))
with compute.wallet(100.0) as w2, doubled:
    costly(jnp.ones(2))
    fx.jit(costly)(jnp.ones(2))

# case: the doubling interceptor with no wallet outside it
with doubled:
    costly_bad = costly(jnp.ones(2))  # E: effax-unhandled


# case: a subclass interceptor answering every spend itself (free compute)
class FreeCompute(fx.Interceptor[Budget]):
    def spend(self, amount: jax.Array | float) -> None:
        del amount


with FreeCompute(compute, ()):
    free = costly(jnp.ones(2))
    free_jit = fx.jit(costly)(jnp.ones(2))


# case: a handler maker without a return annotation (a `with` of it may handle anything)
with compute.wallet_untyped():
    costly(jnp.ones(2))
with compute.wallet_untyped():
    report(jnp.float32(1.0))  # limit: a handler maker without a return annotation: nothing under its `with` is reported


# case: a generic buffer whose push spends from the budget
class Buffer(Generic[T]):
    def __init__(self) -> None:
        self.items: list[T] = []

    @fx.uses(compute)
    def push(self, item: T) -> Buffer[T]:
        compute.spend(1.0)
        self.items.append(item)
        return self


with compute.wallet(5.0):
    buf = Buffer[int]().push(1).push(2)

# case: the generic buffer pushed to at module level without a wallet
buf_bad = Buffer[str]().push("a")  # E: effax-unhandled


# case: a class whose constructor draws, cloned through type(self) in a method with a row
class Node:
    @fx.uses(init_key)
    def __init__(self, width: int) -> None:
        self.width = width
        self.w = jax.random.normal(init_key.next_key(), (width,))

    @fx.uses(init_key)
    def clone(self) -> Node:
        return type(self)(self.width)

    @classmethod
    @fx.uses(init_key, compute)
    def paid(cls, width: int) -> Node:
        compute.spend(float(width))
        return cls(width)

    @staticmethod
    @fx.uses(compute)
    def fee(width: int) -> None:
        compute.spend(0.5 * width)


with init_key.seed(0), compute.wallet():
    root = Node(3)
    twin = root.clone()
    bought = Node.paid(2)
    Node.fee(4)


# case: a clone method whose row forgot the init stream, and constructors with nothing installed
class LeakyNode(Node):
    @fx.uses()
    def clone(self) -> Node:
        return type(self)(self.width)  # E: effax-undeclared


with init_key.seed(0):
    leaky = LeakyNode(2)
    leaky_twin = leaky.clone()
orphan = Node(2)  # E: effax-unhandled
with init_key.seed(1):
    unpaid = Node.paid(2)  # E: effax-unhandled
Node.fee(3)  # E: effax-unhandled


# case: a handled function owning a wallet, and its remaining row handled by the caller
@fx.uses(compute, losses)
def spend_and_report(x: jax.Array) -> jax.Array:
    return report(jnp.sum(costly(x)))


owned = fx.handle(spend_and_report, compute.wallet(3.0))
with losses.collect():
    owned_out = owned(jnp.ones(2))

# case: the handled function's remaining row left unhandled
owned_bad = owned(jnp.ones(2))  # E: effax-unhandled


# case: allowed tags as a static Ask, given a frozenset
allowed = fx.Ask[Collection[str]]("allowed", static=True)


@fx.uses(allowed, compute)
def gated(x: jax.Array, name: str) -> jax.Array:
    if name in allowed.ask():
        compute.spend(1.0)
        return x * 2
    return x


with allowed.provide(frozenset({"a", "b"})), compute.wallet():
    gated_out = fx.jit(gated, static_argnums=1)(jnp.ones(2), "a")

# case: the allowed tags given as a set
with allowed.provide({"a", "b"}), compute.wallet():  # E: effax-handler-type
    gated_bad = gated(jnp.ones(2), "a")


# case: a clock run whose scan body spends from a budget its row does not name
@fx.uses(clock)
def run_clock(x: jax.Array, n: int) -> jax.Array:
    def tick_body(c: jax.Array, _: None) -> tuple[jax.Array, None]:
        clock.advance(0.5)
        return costly(c), None

    out, _ = fx.scan(tick_body, x, None, length=n)  # E: effax-undeclared
    return out


with clock.ticker(), compute.wallet():
    clocked = run_clock(jnp.ones(2), 3)
