"""A user-defined effect: `Counter`, whose handler `Tally` carries an int32 tally."""

from __future__ import annotations

from typing import Any

import attrs
import jax
import jax.numpy as jnp

import effax as fx

__all__ = ["Counter", "Tally", "sites", "rejections"]


class Counter(fx.Effect["Tally"]):
    """Counts events; the tally travels as a carry through traced regions."""

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def tick(self, by: int | jax.Array = 1) -> None:
        tally = self.handler()
        tally.count = tally.count + by

    def tick_if(self, flag: jax.Array) -> None:
        self.tick(jnp.where(flag, 1, 0))

    def tally(self) -> Tally:
        return Tally(self)


def _zero() -> jax.Array:
    return jnp.zeros((), jnp.int32)


@attrs.define(eq=False)
class Tally(fx.Handler[Counter]):
    effect: Counter
    count: jax.Array = attrs.field(factory=_zero)
    fields = fx.Fields(carry="count")

    @property
    def value(self) -> jax.Array:
        return self.count

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: Any, carry: Any) -> Tally:
        return cls(effect, carry)


sites = Counter("sites")  # how many sample sites ran
rejections = Counter("rejections")  # how many proposals a sampler rejected
