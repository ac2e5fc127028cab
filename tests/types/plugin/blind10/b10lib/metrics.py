"""Metric helpers with rows: a generic buffer, overloads, a tracker with a property setter."""

from __future__ import annotations

from typing import Generic, TypeVar, overload

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import ema, metrics, step_count

T = TypeVar("T")
history = fx.State[jax.Array]("history")


class Buffer(Generic[T]):
    """Pushes values into the `metrics` emit and counts them."""

    @fx.uses(metrics, step_count)
    def push(self, v: jax.Array) -> jax.Array:
        metrics.emit(v)
        return step_count.modify(lambda n: n + 1)


@overload
def smooth(x: float) -> jax.Array: ...
@overload
def smooth(x: jax.Array) -> jax.Array: ...
@fx.uses(ema)
def smooth(x: float | jax.Array) -> jax.Array:
    return ema.modify(lambda m: 0.9 * m + 0.1 * jnp.asarray(x, jnp.float32))


class Tracker:
    """Keeps the last value in the `history` state, read and written through a property."""

    @property
    @fx.uses(history)
    def last(self) -> jax.Array:
        return history.get()

    @last.setter
    @fx.uses(history)
    def last(self, v: jax.Array) -> None:
        history.set(v)

    @classmethod
    @fx.uses(history)
    def fresh(cls) -> Tracker:
        history.set(jnp.float32(0))
        return cls()

    @fx.uses(history)
    def copy(self) -> Tracker:
        return type(self).fresh()


@fx.uses(metrics)
def log_metric(v: jax.Array) -> jax.Array:
    metrics.emit(v)
    return v
