"""Interceptors shared by the corpus."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx

from .effects import losses, step_count, temperature

# forwards: needs a collector of `losses` outside it
halve_losses = fx.intercept(losses, emit=lambda outer, v: outer.emit(0.5 * v))

# answers alone: handles `temperature` by itself
cold = fx.intercept(temperature, ask=lambda outer: jnp.float32(0.1))


def _count_then_draw(outer: fx.RandomKey) -> jax.Array:
    step_count.modify(lambda n: n + 1)
    return outer.next_key()


# forwards keys, and counts them in `step_count` (handled outside it)
count_keys = fx.intercept(fx.rng, next_key=_count_then_draw)


class ClipLosses(fx.Interceptor[fx.Emit[jax.Array]]):
    """Clips each emitted loss, then forwards it."""

    def emit(self, value: jax.Array) -> None:
        self.outer().emit(jnp.clip(value, 0.0, 10.0))


class MuteLosses(fx.Interceptor[fx.Emit[jax.Array]]):
    """Drops every emitted loss: answers alone."""

    def emit(self, value: jax.Array) -> None:
        del value


class ScaledTemperature(fx.Interceptor[fx.Ask[jax.Array]]):
    """Multiplies the temperature provided outside by a static factor."""

    def __init__(self, effect: fx.Ask[jax.Array], factor: float) -> None:
        super().__init__(effect, ())
        self.factor = factor

    def ask(self) -> jax.Array:
        return self.outer().ask() * self.factor
