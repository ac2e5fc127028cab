"""Interceptors: functions for effax.intercept and fx.Interceptor subclasses."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from b5lib.effects import dropout as drop_stream
from b5lib.effects import losses as loss_events
from b5lib.effects import steps as n_steps
from b5lib.effects import temperature as heat


def halve_emit(outer: Any, v: jax.Array) -> None:
    outer.emit(0.5 * v)


def count_draw(outer: fx.KeyStream) -> jax.Array:
    n_steps.modify(lambda n: n + 1)
    return outer.next_key()


def fixed_heat(outer: fx.Provider[jax.Array]) -> jax.Array:
    return jnp.float32(0.25)  # E: no-any-return


class Hotter(fx.Interceptor[fx.Ask[jax.Array]]):
    """Doubles the temperature provided outside (forwards)."""

    def ask(self) -> jax.Array:
        return 2.0 * self.outer().ask()


class Pinned(fx.Interceptor[fx.Ask[jax.Array]]):
    """Answers every ask itself (handles the temperature)."""

    def ask(self) -> jax.Array:
        return jnp.float32(0.5)  # E: no-any-return


class CountedDraws(fx.Interceptor[fx.RandomKey]):
    """Counts each key drawn in the steps State outside it, then forwards."""

    def next_key(self) -> jax.Array:
        n_steps.modify(lambda n: n + 1)
        return self.outer().next_key()


class Capped(fx.Interceptor[fx.Emit[jax.Array]]):
    """Emits at most `cap` to the collector outside."""

    def __init__(self, effect: fx.Emit[jax.Array], cap: float) -> None:
        super().__init__(effect, ())
        self.cap = cap

    def emit(self, value: jax.Array) -> None:
        self.outer().emit(jnp.minimum(value, self.cap))


HALVING = fx.intercept(loss_events, emit=halve_emit)
COUNTING = fx.intercept(drop_stream, next_key=count_draw)
PINNED_HEAT = fx.intercept(heat, ask=fixed_heat)
