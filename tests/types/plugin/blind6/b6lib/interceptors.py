"""Interceptors the project shares: made once, installed by the scripts."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b6lib.effects import draws, dropout, learning_rate, losses, seen, acts, temperature, verbose


def halve(outer: fx.Collector[jax.Array], v: jax.Array) -> None:
    """Forwards every emitted loss, halved."""
    outer.emit(0.5 * v)


def frozen_temperature(outer: fx.Provider[jax.Array]) -> jax.Array:
    """Answers on its own: never asks the provider outside."""
    return jnp.float32(0.25)  # E: no-any-return


def count_draw(outer: fx.KeyStream) -> jax.Array:
    """Counts each draw in `draws`, then forwards it."""
    draws.modify(lambda n: n + 1)
    return outer.next_key()


def prefix_site(outer: fx.TapHandler[jax.Array], site: str, v: jax.Array) -> jax.Array:
    return outer.tap(f"net/{site}", v)


half_losses = fx.intercept(losses, emit=halve)
cold = fx.intercept(temperature, ask=frozen_temperature)
warmer = fx.intercept(temperature, ask=lambda outer: 1.5 * outer.ask())
counting = fx.intercept(dropout, next_key=count_draw)
prefixed = fx.intercept(acts, tap=prefix_site)
muted = fx.intercept(acts, tap=lambda outer, site, v: v)
loud = fx.intercept(verbose, ask=lambda outer: True)
mirror = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, seen.tap(site, v)))


class CappedLR(fx.Interceptor[fx.Ask[jax.Array]]):
    """Forwards the learning rate, capped: needs a provider outside."""

    def __init__(self, effect: fx.Ask[jax.Array], cap: float) -> None:
        super().__init__(effect, ())
        self.cap = cap

    def ask(self) -> jax.Array:
        return jnp.minimum(self.outer().ask(), self.cap)


class ConstantLR(CappedLR):
    """Overrides `ask` to answer alone: no provider needed outside."""

    def ask(self) -> jax.Array:
        return jnp.float32(self.cap)  # E: no-any-return


class ScaledLosses(fx.Interceptor[fx.Emit[jax.Array]]):
    """Scales emitted losses and forwards them."""

    def __init__(self, effect: fx.Emit[jax.Array], factor: float) -> None:
        super().__init__(effect, ())
        self.factor = factor

    def emit(self, v: jax.Array) -> None:
        self.outer().emit(self.factor * v)


class DroppedLosses(ScaledLosses):
    """Inherits `__init__`, overrides `emit` to drop the value: handles `losses`."""

    def emit(self, v: jax.Array) -> None:
        del v


class CountedKeys(fx.Interceptor[fx.RandomKey]):
    """Counts draws in `draws` and forwards them (a State outside is needed too)."""

    def next_key(self) -> jax.Array:
        draws.modify(lambda n: n + 1)
        return self.outer().next_key()


LR_CAP = CappedLR(learning_rate, 0.05)
