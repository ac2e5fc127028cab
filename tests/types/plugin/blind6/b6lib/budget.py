"""A custom effect: a compute budget that layers spend from, carried as an array."""

from __future__ import annotations

import attrs
import jax
import jax.numpy as jnp

import effax as fx


class Budget(fx.Effect["Wallet"]):
    """Layers spend from a budget; the wallet keeps what is left."""

    operations = ("spend",)

    def __init__(self, name: str) -> None:
        self.name = name

    def spend(self, amount: jax.Array | float) -> None:
        self.handler().spend(amount)

    def left(self) -> jax.Array:
        return self.handler().remaining

    def wallet(self, start: float = 100.0) -> Wallet:
        return Wallet(self, jnp.float32(start))

    def wallet_untyped(self, start: float = 100.0):  # type: ignore[no-untyped-def]
        return Wallet(self, jnp.float32(start))


@attrs.define(eq=False)
class Wallet(fx.Handler[Budget]):
    effect: Budget
    remaining: jax.Array = attrs.field(factory=lambda: jnp.float32(100.0))
    fields = fx.Fields(carry="remaining")

    def spend(self, amount: jax.Array | float) -> None:
        self.effect.check_store(self, amount)
        self.remaining = self.remaining - amount

    @property
    def value(self) -> jax.Array:
        return self.remaining

    @classmethod
    def rebuild(cls, effect: Budget, static: object, const: object, carry: jax.Array) -> Wallet:
        return cls(effect, carry)


compute = Budget("compute")
