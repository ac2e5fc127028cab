"""A custom effect: a meter that accumulates amounts, and its handlers."""

from __future__ import annotations

import attrs
import jax
import jax.numpy as jnp

import effax as fx


class Meter(fx.Effect["Gauge"]):
    operations = ("add", "read")

    def add(self, amount: jax.Array | float) -> None:
        self.handler().add(amount)

    def read(self) -> jax.Array:
        return self.handler().read()

    def gauge(self) -> Gauge:
        return Gauge(self)

    def loose(self):  # type: ignore[no-untyped-def]
        return Gauge(self)


@attrs.define(eq=False)
class Gauge(fx.Handler[Meter]):
    effect: Meter
    total: jax.Array = attrs.field(factory=lambda: jnp.float32(0))
    fields = fx.Fields(carry="total")

    def add(self, amount: jax.Array | float) -> None:
        self.effect.check_store(self, amount)
        self.total = self.total + amount

    def read(self) -> jax.Array:
        return self.total

    @property
    def value(self) -> jax.Array:
        return self.total

    @classmethod
    def rebuild(cls, effect: Meter, static: object, const: object, carry: jax.Array) -> Gauge:
        return cls(effect, carry)


class Clipped(fx.Interceptor[Meter]):
    """Forwards each amount to the meter outside, at most `cap` at a time."""

    def __init__(self, effect: Meter, cap: float) -> None:
        super().__init__(effect, ())
        self.cap = cap

    def add(self, amount: jax.Array | float) -> None:
        self.outer().add(jnp.minimum(amount, self.cap))


class Frozen(fx.Interceptor[Meter]):
    """Answers every add by itself: nothing reaches the meter outside."""

    def add(self, amount: jax.Array | float) -> None:
        return None

    def read(self) -> jax.Array:
        return jnp.float32(0)  # E: no-any-return


energy = Meter("energy")
cost = Meter("cost")
