"""A custom effect (a budget meter), its handler, and a forwarding interceptor subclass."""

from __future__ import annotations

import attrs
import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import step_count


class Meter(fx.Effect["Gauge"]):
    """Accumulates a float32 total, e.g. an energy or FLOP budget."""

    operations = ("add",)

    def __init__(self, name: str) -> None:
        self.name = name

    def add(self, amount: jax.Array | float) -> None:
        self.handler().add(amount)

    def gauge(self) -> Gauge:
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
    def rebuild(cls, effect: Meter, static: object, const: object, carry: jax.Array) -> Gauge:
        return cls(effect, carry)


energy = Meter("energy")
flops = Meter("flops")


class Capped(fx.Interceptor[Meter]):
    """Forwards each addition to the meter outside, at most `cap` at a time."""

    def __init__(self, effect: Meter, cap: float) -> None:
        super().__init__(effect, ())
        self.cap = cap

    def add(self, amount: jax.Array | float) -> None:
        self.outer().add(jnp.minimum(amount, self.cap))


class Swallow(fx.Interceptor[Meter]):
    """Answers additions by itself: counts them in `step_count`, adds nothing."""

    def add(self, amount: jax.Array | float) -> None:
        step_count.modify(lambda n: n + 1)


@fx.uses(energy)
def spend(x: jax.Array) -> jax.Array:
    energy.add(jnp.sum(jnp.abs(x)))
    return x * 0.5


class Budget(fx.Effect["Purse"]):
    """A spending budget: `left` reads what remains, `pay` spends."""

    operations = ("pay", "remaining")

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def left(self) -> jax.Array:
        return self.handler().remaining()

    def pay(self, amount: jax.Array | float) -> None:
        self.handler().pay(amount)

    def purse(self, amount: float) -> Purse:
        return Purse(self, jnp.float32(amount))


@attrs.define(eq=False)
class Purse(fx.Handler[Budget]):
    effect: Budget
    amount: jax.Array = attrs.field(factory=lambda: jnp.float32(0))
    fields = fx.Fields(carry="amount")

    def pay(self, amount: jax.Array | float) -> None:
        self.effect.check_store(self, amount)
        self.amount = self.amount - amount

    def remaining(self) -> jax.Array:
        return self.amount

    @property
    def value(self) -> jax.Array:
        return self.amount

    @classmethod
    def rebuild(cls, effect: Budget, static: object, const: object, carry: jax.Array) -> Purse:
        return cls(effect, carry)


budget = Budget("budget")
