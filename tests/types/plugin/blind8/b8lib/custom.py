"""Custom effects: a ledger of costs (carried), and an interceptor that scales it."""

from __future__ import annotations

from typing import Any

import attrs
import jax
import jax.numpy as jnp

import effax as fx


class Ledger(fx.Effect["LedgerCell"]):
    """Accumulates a float total (a log density, a cost) through traced regions."""

    operations = ("add",)

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def add(self, amount: jax.Array | float) -> None:
        self.handler().add(amount)

    def open(self) -> LedgerCell:
        return LedgerCell(self)


@attrs.define(eq=False)
class LedgerCell(fx.Handler[Ledger]):
    effect: Ledger
    total: jax.Array = attrs.field(factory=lambda: jnp.float32(0))
    fields = fx.Fields(carry="total")

    def add(self, amount: jax.Array | float) -> None:
        self.effect.check_store(self, amount)
        self.total = self.total + amount

    @property
    def value(self) -> jax.Array:
        return self.total

    @classmethod
    def rebuild(cls, effect: Ledger, static: Any, const: Any, carry: Any) -> LedgerCell:
        return cls(effect, carry)


class Scaled(fx.Interceptor):  # E: type-arg
    """Forwards every addition to the ledger outside, multiplied by `factor`."""

    def __init__(self, effect: Ledger, factor: float) -> None:
        super().__init__(effect, ())
        self.factor = factor

    def add(self, amount: jax.Array | float) -> None:
        self.outer().add(amount * self.factor)  # type: ignore[attr-defined]  # E: unused-ignore


class Muted(fx.Interceptor):  # E: type-arg
    """Answers every addition itself: nothing reaches a ledger outside."""

    def add(self, amount: jax.Array | float) -> None:
        del amount


log_density = Ledger("log_density")
cost = Ledger("cost")
